"""bench/bench_annotator_aware_rm.py's figures on hand-derived values (no training): the majority
label, the expected calibration error, the mean and sd over seeds of both models and of their
paired difference, and the file of finished runs a rerun resumes from."""

import json

import numpy as np
import pytest

from tests.helpers.bench_scripts import bench_script


@pytest.fixture(scope="module")
def bench():
    with bench_script("bench_annotator_aware_rm") as module:
        yield module


def test_majority_is_the_strict_plurality(bench):
    assert bench.majority({"x": "a", "y": "a", "z": "b"}) == "a"
    assert bench.majority({"x": "tie", "y": "tie", "z": "a"}) == "tie"
    assert bench.majority({"x": "a", "y": "b"}) is None
    assert bench.majority({"x": "a", "y": "b", "z": "tie"}) is None


def test_expected_calibration_error_by_hand(bench):
    """p = 0.05 (B won), 0.15 (A won), 0.95 and 0.90 (A won both), 10 bins: bin 0 holds 1 pair,
    |0.05 - 0| = 0.05; bin 1 holds 1, |0.15 - 1| = 0.85; bin 9 holds 2, |0.925 - 1| = 0.075.
    ECE = 0.25 * 0.05 + 0.25 * 0.85 + 0.5 * 0.075 = 0.2625. p = 1.0 falls in the last bin."""
    p_a = np.array([0.05, 0.15, 0.95, 0.90])
    a_won = np.array([0.0, 1.0, 1.0, 1.0])
    assert bench.expected_calibration_error(p_a, a_won) == pytest.approx(0.2625)
    assert bench.expected_calibration_error(np.array([1.0]), np.array([1.0])) == 0.0


def test_summary_over_seeds_and_the_paired_difference(bench):
    """plain 0.60, 0.70; aware 0.65, 0.70: differences 0.05 and 0.00, mean 0.025, sd (n - 1)
    sqrt(2 * 0.025^2) = 0.0354."""
    figures = {f: 0.0 for f in bench.FIGURES}
    runs = [
        {"plain": figures | {"acc_consensus": 0.60}, "aware": figures | {"acc_consensus": 0.65}},
        {"plain": figures | {"acc_consensus": 0.70}, "aware": figures | {"acc_consensus": 0.70}},
    ]
    acc = bench.summarise(runs)["acc_consensus"]
    assert (acc["plain_mean"], acc["aware_mean"]) == (0.65, 0.675)
    assert acc["plain_sd"] == pytest.approx(0.0707, abs=1e-4)
    assert acc["diff_per_seed"] == [0.05, 0.0]
    assert (acc["diff_mean"], acc["diff_sd"]) == (0.025, pytest.approx(0.0354, abs=1e-4))


def test_finished_runs_are_read_back_by_data_set_and_seed(bench, tmp_path):
    path = tmp_path / "runs.jsonl"
    assert bench.read_runs(path) == {} and bench.read_runs(None) == {}
    rows = [
        {"data": "pandalm", "seed": 0, "steps": 30},
        {"data": "mt_bench", "seed": 2, "steps": 9},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert bench.read_runs(path) == {("pandalm", 0): {"steps": 30}, ("mt_bench", 2): {"steps": 9}}

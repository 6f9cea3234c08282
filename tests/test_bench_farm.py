"""The gold-reward farm's small configuration (bench/farm.py --small) closes the loop on the built-in
synthetic domain (no shared data needed: it runs in CI): programmatic gold, simulated annotators
label through the labelling services, consensus and export, a reward model and an RLOO run through
the worker path, gold points at every evaluation, the peak line, a recorded roll-back decision and a
gold win rate, for both pipelines. Tiny models, minutes on a loaded CPU: it checks the loop turns,
not that it helps. The HH-RLHF configuration (gold a trained reward model) needs the shared data."""

import math

import pytest

from annotation.models import Project
from bench.farm import HH_FILE, HH_SMALL, SMALL, mean_interval, round_budgets, run_farm, win_rate
from bench.farm_eval import answer_row, gold_verdict
from bench.farm_rules import ALARMS
from monitoring.models import StopDecision
from tests.helpers.shared_data import DATA_DIR, require
from training.models import MetricPoint, TrainingRun

# Committed rows: the worker path's heartbeat thread reads the run on its own connection, and a run
# it cannot see counts as reaped (cancelled), as in tests/training/test_runs_worker.py.
pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def _farm(tmp_path, settings, config):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.CONCORD_MODELS_DIR = tmp_path / "models"
    (tmp_path / "models").mkdir()
    return run_farm(config, [0], tmp_path / "work")


def test_the_small_farm_closes_the_loop(tmp_path, settings):
    report = _farm(tmp_path, settings, SMALL)
    assert report["gold"]["kind"] == "programmatic" and report["gold"]["accuracy"] == 1.0
    _check_loop(report)
    _check_active_collection(report["runs"])
    plain, concord = report["runs"]
    # Concord's cluster-balanced batches: the app's clustering run over every training prompt
    assert plain["clusters"] is None and concord["clusters"]["k"] == SMALL.clusters == 2
    assert sum(concord["clusters"]["sizes"]) == SMALL.pairs


def test_the_hh_farm_trains_and_measures_its_gold(tmp_path, settings):
    require(DATA_DIR / HH_FILE)  # HH-RLHF's harmless pairs from ../shared/data; skipped without
    report = _farm(tmp_path, settings, HH_SMALL)
    assert 0 <= report["gold"]["accuracy"] <= 1 and report["gold"]["held_out_pairs"] == 40
    _check_loop(report)


def _check_loop(report):
    runs = report["runs"]
    assert [r["pipeline"] for r in runs] == ["plain", "concord"]
    for run in runs:
        assert 0 < run["labels"] <= SMALL.label_budget
        # label and reward-model quality against gold: the consensus and the held-out pairs
        assert 0 <= run["consensus_accuracy"] <= 1 and 0 <= run["rm_accuracy"] <= 1
        assert 0 < run["exported_pairs"] <= SMALL.pairs
        assert 0 <= run["gold_win_rate"] <= 1 and math.isfinite(run["gold_reward"])
        assert run["curve"] and all(math.isfinite(p["gold"]) for p in run["curve"])
        assert run["peak_line"].endswith(".")
        rl = TrainingRun.objects.get(pk=run["rl_run"])
        assert rl.status == TrainingRun.Status.SUCCEEDED
        # a gold point at every checkpoint; the curve's first row is the starting policy (KL 0)
        assert run["curve"][0]["step"] == 0 and run["curve"][0]["kl"] == 0
        gold_points = MetricPoint.objects.filter(run=rl, name="gold_reward_mean")
        rated = [row for row in run["curve"] if row["gold_rated"]]
        assert gold_points.count() == len(rated) == (len(run["curve"]) - 1) // SMALL.gold_every
        (decision,) = StopDecision.objects.filter(run=rl)
        assert decision.decision == run["decision"]
        assert set(run["alarms"]["first_fired"]) == set(ALARMS)
        if run["decision"] == "reject":  # every round against the base lost: the base is kept
            assert rl.result_is_base and run["kept_step"] == 0 and run["eval_round"] is None
            assert run["gold_win_rate"] == 0.5
        else:  # the kept checkpoint's eval round, rated from gold through the eval-round services
            assert decision.checkpoint.step == run["kept_step"]
            assert run["eval_round"]["ratings"] >= 3 and run["eval_round"]["status"] == "closed"
        assert [v["rule"] for v in run["stop_rules"]] == ["peak_fit", "plateau", "fixed_kl"]
    assert runs[0]["consensus"] == "majority" and runs[1]["consensus"] == "dawid_skene"
    assert (runs[0]["ensemble_size"], runs[1]["ensemble_size"]) == (1, SMALL.ensemble_size)
    assert runs[1]["curve"][1]["disagreement"] is not None  # the ensemble's spread is read
    assert runs[0]["kept_step"] == SMALL.rl_steps  # plain: fixed steps, the last one
    assert runs[0]["decision"] == "rollback" and runs[0]["base_rounds"] == []
    # concord: a round against the base on each gold-rated checkpoint, read by the panel
    rated_steps = [row["step"] for row in runs[1]["curve"] if row["gold_rated"]]
    assert [r["step"] for r in runs[1]["base_rounds"]] == rated_steps
    assert all(r["status"] == "closed" for r in runs[1]["base_rounds"])
    assert set(report["summary"]) == {"plain", "concord"}


def test_win_rate_and_interval_by_hand():
    """Ours (1, 2, 3) against theirs (0, 2, 4): a win, a tie, a loss -> (1 + 0.5 + 0) / 3 = 0.5;
    one value's interval is the value itself."""
    import numpy as np

    assert win_rate(np.array([1.0, 2, 3]), np.array([0.0, 2, 4])) == pytest.approx(0.5)
    assert mean_interval([0.7]) == {"mean": 0.7, "low": 0.7, "high": 0.7, "n": 1}
    both = mean_interval([0.0, 1.0])
    assert both["mean"] == 0.5 and 0 <= both["low"] <= 0.5 <= both["high"] <= 1


def test_gold_verdict_and_answer_row_by_hand():
    """gap 1: the checkpoint wins when the draw is under sigmoid(1) = 0.731, usefulness 3 + 1 = 4;
    equal gold is a tie; usefulness is clipped to 1-5. Two members [[1, 2], [3, 4]]: member means
    (2, 3), proxy 2.5, each answer's population std 1."""
    import numpy as np

    assert gold_verdict(2.0, 1.0, 0.5) == ("checkpoint", 4)
    assert gold_verdict(2.0, 1.0, 0.8) == ("baseline", 4)
    assert gold_verdict(1.0, 1.0, 0.1) == ("tie", 3)
    assert gold_verdict(-5.0, 1.0, 0.9) == ("baseline", 1)
    row = answer_row(
        ["Any tips on garden for a friend?"] * 2, ["Soil.", "Soil and water, thank you for your question!"],
        np.array([1.0, 2.0]), np.array([[1.0, 2.0], [3.0, 4.0]]),
    )  # fmt: skip
    assert row["proxy"] == 2.5 and row["gold"] == 1.5 and row["disagreement"] == 1.0
    assert row["phrase"] == 0.5 and row["words"] == 4.5 and row["rho"] is None  # 2 answers
    with pytest.raises(ValueError, match="members"):
        answer_row(["p"], ["a"], np.array([1.0]), np.array([[1.0, 2.0]]))


def _check_active_collection(runs):
    """Concord's active collection: the project ordered by the acquisition strategy, and one
    provisional ensemble, trained after the first half of the labels, scored every training pair
    (its preference and disagreement stored on the comparisons, the queue re-ordered by them)."""
    assert runs[0]["active"] == [] and SMALL.active_rounds == 1
    (active,) = runs[1]["active"]
    assert active["labels"] == round_budgets(SMALL.label_budget, 1)[0]
    assert active["scored"] == SMALL.pairs
    project = Project.objects.get(slug="farm-concord-0")
    assert project.queue_order == SMALL.acquisition
    scored = project.comparisons.filter(ensemble_disagreement__isnull=False)
    assert scored.count() == SMALL.pairs
    provisional = TrainingRun.objects.get(pk=active["rm_run"])
    assert provisional.status == TrainingRun.Status.SUCCEEDED and provisional.kind == "rm"


def test_consensus_accuracy_by_hand(tmp_path):
    """Three exported pairs: comparison 1 chose A where gold prefers A (right), 2 chose B where
    gold prefers A (wrong), 3 a tie (left out): 1 of 2. An empty export has none."""
    import json

    from bench.farm import consensus_accuracy

    rows = [{"comparison_id": 1, "chosen_side": "a", "tie": False},
            {"comparison_id": 2, "chosen_side": "b", "tie": False},
            {"comparison_id": 3, "chosen_side": "a", "tie": True}]  # fmt: skip
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold = {1: (1.0, 0.0), 2: (2.0, 1.0), 3: (0.0, 0.0)}
    assert consensus_accuracy(tmp_path, gold) == 0.5
    (tmp_path / "pairs.jsonl").write_text("")
    assert consensus_accuracy(tmp_path, gold) is None

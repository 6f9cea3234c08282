"""``bench/side_by_side.py``: the rounds, the best round and the ratio report every bench against
TRL shares, and a smoke check that each bench script still parses its options without loading
torch or TRL. No benchmark is run here (speed is measured by the scripts, never asserted)."""

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
_spec = importlib.util.spec_from_file_location("side_by_side", BENCH / "side_by_side.py")
side_by_side = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(side_by_side)

FAILED = {"error": "Traceback ...\nRuntimeError: out of memory", "exit_status": 1}


def scripted(results: dict[str, list[dict]]):
    """A ``run_side`` that hands out each side's results in order and records the calls."""
    calls: list[str] = []
    queues = {side: list(runs) for side, runs in results.items()}

    def run_side(side: str) -> dict:
        calls.append(side)
        return queues[side].pop(0)

    return run_side, calls


def test_rounds_alternate_ours_then_trl():
    """Each round runs ours then TRL, so a slow spell of a shared machine hits both sides: three
    rounds are ours, trl, ours, trl, ours, trl, and each side keeps its results in order."""
    run_side, calls = scripted({"ours": [{"n": 1}, {"n": 2}, {"n": 3}], "trl": [{"n": 4}] * 3})
    results = side_by_side.alternate_rounds(run_side, rounds=3)
    assert calls == ["ours", "trl", "ours", "trl", "ours", "trl"]
    assert results == {"ours": [{"n": 1}, {"n": 2}, {"n": 3}], "trl": [{"n": 4}] * 3}


def test_a_skipped_side_never_runs_and_keeps_an_empty_list():
    """--skip-trl: only ours runs, and the report still has TRL's (empty) list of rounds."""
    run_side, calls = scripted({"ours": [{"n": 1}, {"n": 2}]})
    results = side_by_side.alternate_rounds(run_side, rounds=2, skip=("trl",))
    assert calls == ["ours", "ours"]
    assert results == {"ours": [{"n": 1}, {"n": 2}], "trl": []}


def test_after_round_is_called_once_per_round():
    """The hook (the SimPO/ORPO bench prints the load average) runs after each whole round."""
    run_side, calls = scripted({"full": [{}] * 2, "lora": [{}] * 2})
    side_by_side.alternate_rounds(
        run_side, rounds=2, sides=("full", "lora"), after_round=lambda: calls.append("|")
    )
    assert calls == ["full", "lora", "|", "full", "lora", "|"]


def test_best_round_is_the_fastest_that_succeeded():
    """Other work only slows a run down, so the fastest successful round is kept; a failed round
    (with an error and no rate) is passed over; none successful gives {}."""
    runs = [{"pairs_per_second": 1.5}, FAILED, {"pairs_per_second": 2.5}, {"pairs_per_second": 2.0}]
    assert side_by_side.best_round(runs, "pairs_per_second") == {"pairs_per_second": 2.5}
    assert side_by_side.best_round([FAILED, FAILED], "pairs_per_second") == {}
    assert side_by_side.best_round([], "pairs_per_second") == {}


def test_rates_by_round_list_the_rate_or_the_end_of_the_error():
    """Every round is listed in order: its rate, or the last characters of its error."""
    results = {"ours": [{"rate": 1.25}, FAILED], "trl": []}
    assert side_by_side.rates_by_round(results, "rate", error_chars=13) == {
        "ours": [1.25, "out of memory"],
        "trl": [],
    }


def test_compare_gives_ratios_differences_and_equalities():
    """Ratios are ours / TRL's (3.0 / 1.5 = 2.0; a pair of keys for the warm-cache one, 4.5 / 1.5 =
    3.0; memory 100 / 400 = 0.25); a difference of numbers is |0.70 - 0.69| = 0.01, of lists the
    largest element's (|-2 - -2.5| = 0.5); equality is True or False."""
    ours = {"rate": 3.0, "warm_rate": 4.5, "peak_rss_bytes": 100, "loss": 0.70,
            "logps": [-1.0, -2.0], "tokens": 12}  # fmt: skip
    trl = {"rate": 1.5, "peak_rss_bytes": 400, "loss": 0.69, "logps": [-1.25, -2.5], "tokens": 13}
    report = side_by_side.compare(
        ours,
        trl,
        ratios={"speedup": "rate", "speedup_warm": ("warm_rate", "rate"), "rss": "peak_rss_bytes"},
        differences={"loss_difference": "loss", "max_logp_difference": "logps"},
        same={"same_tokens": "tokens"},
    )
    assert report == {
        "speedup": 2.0,
        "speedup_warm": 3.0,
        "rss": 0.25,
        "loss_difference": pytest.approx(0.01),
        "max_logp_difference": 0.5,
        "same_tokens": False,
    }


def test_compare_is_empty_when_a_side_has_no_successful_round():
    """No ratio can be formed against a side whose every round failed (its best is {})."""
    assert side_by_side.compare({"rate": 2.0}, {}, ratios={"speedup": "rate"}) == {}
    assert side_by_side.compare({}, {"rate": 2.0}, ratios={"speedup": "rate"}) == {}


def test_run_sides_reports_best_ratios_and_rounds_with_a_failed_round():
    """Two rounds; TRL's second fails. Ours' best is 3.0 (of 2.0, 3.0), TRL's 1.5 (its only
    success): speedup 3.0 / 1.5 = 2.0, peak memory 300 / 600 = 0.5; the rounds list TRL's error."""
    run_side, calls = scripted(
        {
            "ours": [{"rate": 2.0, "peak_rss_bytes": 200}, {"rate": 3.0, "peak_rss_bytes": 300}],
            "trl": [{"rate": 1.5, "peak_rss_bytes": 600}, FAILED],
        }
    )
    args = argparse.Namespace(rounds=2, skip_trl=False)
    report = side_by_side.run_sides(args, run_side, rate="rate", error_chars=13)
    assert calls == ["ours", "trl", "ours", "trl"]
    assert report == {
        "ours": {"rate": 3.0, "peak_rss_bytes": 300},
        "trl": {"rate": 1.5, "peak_rss_bytes": 600},
        "speedup": 2.0,
        "peak_rss_ratio": 0.5,
        "rounds": {"ours": [2.0, 3.0], "trl": [1.5, "out of memory"]},
    }


def test_run_sides_with_skip_trl_has_no_ratios():
    """--skip-trl: ours alone, TRL's best is {} and no speedup or memory ratio is reported."""
    run_side, calls = scripted({"ours": [{"rate": 2.0, "peak_rss_bytes": 200}]})
    report = side_by_side.run_sides(
        argparse.Namespace(rounds=1, skip_trl=True), run_side, rate="rate"
    )
    assert calls == ["ours"]
    assert report == {
        "ours": {"rate": 2.0, "peak_rss_bytes": 200},
        "trl": {},
        "rounds": {"ours": [2.0], "trl": []},
    }


def test_run_sides_ranks_by_best_by_but_lists_the_rate():
    """The KTO bench keeps the round with the most examples per CPU second (the second here, 0.9)
    though the first was faster by wall time, and lists wall-time rates."""
    run_side, _ = scripted(
        {"ours": [{"rate": 5.0, "cpu_rate": 0.5}, {"rate": 4.0, "cpu_rate": 0.9}]}
    )
    report = side_by_side.run_sides(
        argparse.Namespace(rounds=2, skip_trl=True), run_side, rate="rate", best_by="cpu_rate"
    )
    assert report["ours"] == {"rate": 4.0, "cpu_rate": 0.9}
    assert report["rounds"]["ours"] == [5.0, 4.0]


def test_forwarded_writes_set_options_as_a_command_line():
    """Underscores become dashes, values strings; an unset (None) option is left out."""
    args = argparse.Namespace(data="work/pairs.jsonl", max_length=256, micro_batch=None)
    assert side_by_side.forwarded(args, "data", "max_length", "micro_batch") == [
        "--data",
        "work/pairs.jsonl",
        "--max-length",
        "256",
    ]


@pytest.mark.parametrize(
    ("choice", "flags", "expected"),
    [
        ("both", [], ("fp32", "bf16")),
        ("bf16", [], ("bf16",)),
        ("auto", ["avx2", "avx512f"], ("fp32",)),
        ("auto", ["avx2", "avx512_bf16"], ("fp32", "bf16")),
        ("auto", ["amx_bf16"], ("fp32", "bf16")),
    ],
)
def test_precisions(choice, flags, expected):
    """ "auto" adds bf16 only where the CPU has bfloat16 hardware (AVX-512 BF16 or AMX)."""
    assert side_by_side.precisions(choice, flags) == expected


def test_run_worker_returns_the_last_json_line_or_the_error(tmp_path):
    """A worker's result is the last JSON object it printed; a failing worker's is its stderr's end
    and its exit status."""
    good = tmp_path / "good.py"
    good.write_text(
        'import json, sys\nprint("loading")\nprint(json.dumps({"side": sys.argv[1]}))\n'
    )
    bad = tmp_path / "bad.py"
    bad.write_text('import sys\nsys.stderr.write("no model here")\nsys.exit(3)\n')
    assert side_by_side.run_worker(good, "ours") == {"side": "ours"}
    assert side_by_side.run_worker(bad, error_chars=10) == {"error": "model here", "exit_status": 3}


SCRIPTS = {
    "bench_dpo_vs_trl.py": ["--pairs", "--batch", "--max-length", "--precision", "--rounds",
                            "--skip-trl", "--keep"],
    "bench_kto_vs_trl.py": ["--pairs", "--batch", "--max-length", "--precision", "--rounds",
                            "--threads", "--skip-trl", "--keep"],
    "bench_grpo_vs_trl.py": ["--prompts", "--g", "--new-tokens", "--steps", "--precision",
                             "--rounds", "--skip-trl", "--passes", "--check", "--keep"],
    "bench_train_rloo_vs_trl.py": ["--prompts", "--k", "--new-tokens", "--steps", "--precision",
                                   "--rounds", "--skip-trl", "--keep"],
    "bench_train_rm_vs_trl.py": ["--pairs", "--batch", "--max-length", "--precision",
                                 "--rounds", "--skip-trl", "--keep"],
    "bench_simpo_orpo_vs_trl.py": ["--algo", "--pairs", "--batch", "--max-length", "--precision",
                                   "--rounds", "--skip-trl", "--keep"],
    "bench_lora_dpo.py": ["--pairs", "--batch", "--micro-batch", "--steps", "--max-length",
                          "--rank", "--precision", "--rounds"],
    "bench_dpo_first_step.py": ["--pairs", "--before-pairs", "--bf16"],
}  # fmt: skip

HELP = """
import runpy, sys
sys.path.insert(0, {bench!r})
sys.argv = [{script!r}, "--help"]
try:
    runpy.run_path({script!r}, run_name="__main__")
except SystemExit as end:
    assert end.code == 0, end.code
print("LOADED", sorted(m for m in ("torch", "trl", "transformers") if m in sys.modules))
"""


@pytest.mark.parametrize(("script", "options"), SCRIPTS.items(), ids=list(SCRIPTS))
def test_each_script_still_answers_help_without_loading_torch_or_trl(script, options):
    """``--help`` exits 0, lists every option the script has always taken (bench/README.md quotes
    them), and loads neither torch, transformers nor TRL: they are imported by the workers."""
    path = BENCH / script
    done = subprocess.run(
        [sys.executable, "-c", HELP.format(bench=str(BENCH), script=str(path))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for option in options:
        assert option in done.stdout, option
    assert done.stdout.strip().splitlines()[-1] == "LOADED []"

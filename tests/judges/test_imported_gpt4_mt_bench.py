"""GPT-4's released MT-Bench verdicts imported as a judge reproduce the paper's agreement figures.

Zheng et al. 2023, Table 5, turn 1: GPT-4 vs experts 66% with ties (setup S1: an order-inconsistent
verdict is a tie), 85% without (S2); experts vs experts 63% and 81%. FastChat's compute_agreement.py
gives 886/1343, 727/859, 454/721 and 388/479 on these files. Here the whole path runs: the expert
votes imported with their texts (``import_comparisons --format mt-bench``; the authors' votes left
out, as upstream), the released verdicts imported as a judge (``import_judge_verdicts --format
mt_bench``), the figures read from ``judge_report --json``. Skips when the shared files are absent.

The experts voted on 821 of the file's 910 comparisons (the other 89 have authors' votes only);
an import is all or nothing, so the file given to it keeps those 821 lines (the other 89 enter no
figure: every figure counts human votes, and only experts' are kept).
"""

import json

import pytest
from django.core.management import call_command

from tests.annotation.agreement.shared_data import DATA_DIR, MT_BENCH, MT_BENCH_GPT4, require

pytestmark = pytest.mark.django_db
QUESTIONS = DATA_DIR / "mt_bench" / "question.jsonl"
ANSWERS = DATA_DIR / "mt_bench" / "model_answer"


def _pair(row: dict) -> tuple:
    return (row["question_id"], *sorted((row["model_a"], row["model_b"])))


def test_imported_gpt4_verdicts_reproduce_the_mt_bench_paper(tmp_path, capsys):
    for path in (MT_BENCH, MT_BENCH_GPT4, QUESTIONS):
        require(path)
    experts = tmp_path / "experts.jsonl"
    with MT_BENCH.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    experts.write_text(
        "".join(json.dumps(r) + "\n" for r in rows if str(r["judge"]).startswith("expert"))
    )
    call_command(
        "import_comparisons", str(experts), "--project", "mtb", "--format", "mt-bench",
        "--questions", str(QUESTIONS), "--answers", str(ANSWERS),
    )  # fmt: skip
    voted = {_pair(r) for r in rows if str(r["judge"]).startswith("expert")}
    released = tmp_path / "gpt4.jsonl"
    with MT_BENCH_GPT4.open(encoding="utf-8") as handle:
        released.write_text("".join(line for line in handle if _pair(json.loads(line)) in voted))
    call_command(
        "import_judge_verdicts", "--project", "mtb", "--judge", "gpt-4", "--format", "mt_bench",
        "--file", str(released),
        "--description", "GPT-4's released pairwise verdicts (lmsys/mt_bench_human_judgments)",
    )  # fmt: skip
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith(
            "821 comparisons, 0 with per-order verdicts, 821 combined (126 inconsistent across orders)"
        )
    )
    call_command("judge_report", "--project", "mtb", "--judge", "gpt-4", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["vote_agreement"] == {
        "judge_human": 0.6597, "judge_human_n": 1343,
        "judge_human_no_ties": 0.8463, "judge_human_no_ties_n": 859,
        "human_human": 0.6297, "human_human_n": 721,
        "human_human_no_ties": 0.81, "human_human_no_ties_n": 479,
    }  # fmt: skip
    # 821 combined verdicts: 695 consistent (609 decisive), 126 whose orders disagreed.
    assert (report["swap_pairs"], report["swap_decisive_pairs"], report["swap_undetailed"]) == (
        821, 609, 126
    )  # fmt: skip
    assert report["swap_flip_rate_high"] == round(126 / (609 + 126), 4)
    assert report["position_n"] == 0  # the release does not say which answer GPT-4 saw first

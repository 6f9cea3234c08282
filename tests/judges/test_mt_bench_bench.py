"""bench/judge_mt_bench.py's data side on the MT-Bench expert votes (skipped without ../shared/data):
the split by question and the experts' agreement among themselves, the yardstick its judges'
figures are read against; and that without FastChat's texts it says the judges were not run."""

import json
import subprocess
import sys

import pytest

from tests.helpers.bench_scripts import BENCH, bench_script
from tests.helpers.shared_data import DATA_DIR, MT_BENCH, require


@pytest.fixture(scope="module")
def bench():
    with bench_script("judge_mt_bench") as module:
        yield module


def test_the_split_is_by_question_and_loses_no_vote(bench):
    votes = bench.read_votes(require(MT_BENCH))
    heldout, train = bench.split_by_question(votes, 10)
    assert sorted({v["question_id"] for v in heldout}) == list(range(81, 91))
    assert not {v["question_id"] for v in heldout} & {v["question_id"] for v in train}
    assert (len(heldout), len(train)) == (190, 1499)
    with pytest.raises(SystemExit, match="between 1 and 79"):
        bench.split_by_question(votes, 80)


def test_experts_agree_as_zheng_et_al_report(bench):
    """910 (question, model pair) comparisons, 1,688 votes (one judge's repeated vote counted once),
    484 comparisons with 2+ votes. Pooled pairwise agreement 0.641 with ties and 0.820 without:
    Zheng et al. (2023) give about 63% and 81% for expert-expert agreement."""
    figures = bench.expert_agreement(bench.read_votes(require(MT_BENCH)))
    assert (figures["comparisons"], figures["votes"]) == (910, 1688)
    assert figures["comparisons_with_2_votes_or_more"] == 484
    assert figures["percent_agreement"] == pytest.approx(0.6411, abs=1e-4)
    assert figures["percent_agreement_no_ties"] == pytest.approx(0.8199, abs=1e-4)


def test_without_the_texts_the_bench_says_the_judges_were_not_run(tmp_path):
    """Pointed at a folder without FastChat's question.jsonl, the bench prints the experts' own
    agreement (turn 1, experts only: 821 comparisons, 1,343 votes) and says why no judge ran."""
    require(MT_BENCH)
    out = subprocess.run(
        [sys.executable, str(BENCH / "judge_mt_bench.py"), "--mt-bench-dir", str(tmp_path)],
        capture_output=True, text=True, check=True,
        env={"CONCORD_SHARED_DATA": str(DATA_DIR), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert (result["experts"]["comparisons"], result["experts"]["votes"]) == (821, 1343)
    assert result["judges"].startswith("not run: the votes carry no text")


def test_the_llm_subset_is_a_fixed_random_sample_of_the_voted_comparisons(bench):
    """The same ids for the same seed whatever the set's order, another sample for another seed,
    drawn from all the questions (not the first ones), never more than there are; a size below 1
    is refused."""
    pairs = ("m1|m2", "m1|m3", "m2|m3")
    voted = {f"mt-bench:{q}:turn1:{pair}" for q in range(81, 161) for pair in pairs}
    first = bench.llm_subset(voted, 40, 0)
    assert first == bench.llm_subset(set(sorted(voted, reverse=True)), 40, 0)
    assert len(first) == 40 and first <= voted
    assert bench.llm_subset(voted, 40, 1) != first
    questions = sorted(int(key.split(":")[1]) for key in first)
    assert questions[0] < 100 and questions[-1] > 140  # spread over the 80 questions
    assert bench.llm_subset(voted, 500, 0) == voted
    with pytest.raises(SystemExit, match="at least 1"):
        bench.llm_subset(voted, 0, 0)

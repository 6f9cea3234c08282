"""The MT-Bench paper's agreement figures in the judge report: ``judge_report --json``, its text,
the judge page and ``agreement --json`` (only with a judge).

The project's first two pairs (tests/helpers/judge_world.py) are judged, in both orders:
    pair 0: a, a   -> a (consistent)     humans a, a, a
    pair 1: a, b   -> tie (a flip)       humans a, a, b
Judge vs humans with ties: 3 of 3 on pair 0, 0 of 3 on pair 1 -> 3 of 6 = 50%. Without ties pair 1
goes (the judge said tie): 3 of 3 = 100%. Humans vs humans on those two pairs: pair 0 3 of 3 pairs
agree, pair 1 1 of 3 -> 4 of 6 = 67%; no human tie there, so the same without ties.
"""

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from monitoring.models import JudgeOutput
from monitoring.services.judges import judge_create, judge_verdicts_store
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db

EXPECTED = {
    "judge_human": 0.5, "judge_human_n": 6,
    "judge_human_no_ties": 1.0, "judge_human_no_ties_n": 3,
    "human_human": 0.6667, "human_human_n": 6,
    "human_human_no_ties": 0.6667, "human_human_no_ties_n": 6,
}  # fmt: skip


def _judge_two_pairs(project, run):
    judge = judge_create(
        project=project, name="rm", kind="reward_model", created_by=None, reward_run=run
    )
    comparisons = list(project.comparisons.order_by("pk"))
    for comparison, pair in zip(comparisons, [("a", "a"), ("a", "b")], strict=False):
        for first, verdict in zip("ab", pair, strict=True):
            JudgeOutput.objects.create(
                judge=judge, comparison=comparison, shown_first=first, raw=verdict,
                verdict=verdict, seconds=0.5,
            )  # fmt: skip
    judge_verdicts_store(judge=judge)
    return judge


@pytest.fixture
def judged(judged_project, reward_run):
    return _judge_two_pairs(judged_project, reward_run)


def test_judge_report_json_and_text_give_the_vote_agreement(judged, capsys):
    call_command("judge_report", "--project", "judged", "--judge", "rm", "--json")
    assert json.loads(capsys.readouterr().out)["vote_agreement"] == EXPECTED
    call_command("judge_report", "--project", "judged", "--judge", "rm")
    assert (
        "votes agreeing with ties / without: judge vs humans 0.5 (n=6) / 1.0 (n=3); "
        "humans vs humans 0.6667 (n=6) / 0.6667 (n=6)"
    ) in capsys.readouterr().out


def test_judge_page_shows_the_vote_agreement(judged, ml_engineer):
    page = logged_in(ml_engineer).get(reverse("monitoring:judge-report", args=[judged.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    assert (
        "the judge with each human vote 50% of 6 pairs (100% of 3 leaving out ties); the humans "
        "with each other on the same pairs 67% of 6 (67% of 6 leaving out ties)"
    ) in body


def test_agreement_json_adds_judges_only_when_a_judge_answered(judged_project, reward_run, capsys):
    """Without a judge the object keeps exactly its documented keys; with one it gains "judges".
    Kappa with the consensus (a on both pairs) of the judge's a, tie: observed 1/2, chance 1/2 -> 0."""
    call_command("agreement", "--project", "judged", "--json")
    assert "judges" not in json.loads(capsys.readouterr().out)
    _judge_two_pairs(judged_project, reward_run)
    call_command("agreement", "--project", "judged", "--json")
    assert json.loads(capsys.readouterr().out)["judges"] == [
        {"judge": "rm", "version": 1, "kappa_consensus": 0.0, "kappa_consensus_n": 2,
         "vote_agreement": EXPECTED}
    ]  # fmt: skip

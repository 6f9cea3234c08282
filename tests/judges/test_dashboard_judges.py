"""The agreement dashboard beside the model judges: human-only by default with a toggle
(``?judges=1``) that shows each judge's figures and a link to its report; and the suggestions'
figures (kept rate, kappa with the judge with and without the suggestion on screen)."""

import pytest
from django.test import Client
from django.urls import reverse

from annotation.models import Judgement
from annotation.selectors.agreement import suggestion_report
from annotation.services import agreement as agreement_services
from annotation.services.projects import project_update
from monitoring.services import judges as judge_services
from tests.helpers.caches import private_cache
from tests.helpers.judge_world import judge_outputs_by_hand, reward_model_judge

pytestmark = pytest.mark.django_db
MAJORITY = ["a", "a", "a", "a", "b", "a"]  # ann1's choices on the 6 pairs (conftest.ROWS)


@pytest.fixture(autouse=True)
def _private_cache(settings):
    private_cache(settings, "judges")


@pytest.fixture
def judge(judged_project, reward_run):
    """A reward-model judge that gave ann1's verdict on every pair in both orders, stored."""
    judge = reward_model_judge(judged_project, reward_run)
    judge_outputs_by_hand(judge, [(m, m) for m in MAJORITY])
    judge_services.judge_verdicts_store(judge=judge)
    agreement_services.dashboard_refresh(project=judged_project, n_boot=20, pair_boot=10)
    return judge


@pytest.fixture
def lead(ml_engineer):
    client = Client()
    client.force_login(ml_engineer)
    return client


def test_the_dashboard_is_human_only_by_default_with_a_toggle(judge, lead):
    url = reverse("annotation:agreement", args=[judge.project.slug])
    html = lead.get(url).content.decode()
    assert 'href="?judges=1"' in html and 'data-testid="judge-figures"' not in html
    assert judge.annotator.username not in html
    assert 'data-testid="suggestions"' not in html  # no suggestion judge, none ever shown


def test_the_toggle_shows_each_judge_beside_the_humans_with_its_report(judge, lead):
    """ann1's verdicts everywhere: kappa 1 with the consensus on the 5 pairs that have one, with
    ann1 on all 6; no swap flips (both orders agree)."""
    url = reverse("annotation:agreement", args=[judge.project.slug])
    response = lead.get(url, {"judges": "1"})
    judges = response.context["judges"]
    assert [(j["judge"], j["version"]) for j in judges] == [("rm", 1)]
    row = judges[0]
    assert (row["kappa_consensus"], row["kappa_consensus_n"]) == (1.0, 5)
    assert row["kappa_per_human"][0] == {"annotator": "ann1", "kappa": 1.0, "n": 6}
    assert (row["swap_flips"], row["swap_decisive_pairs"]) == (0, 6)
    html = response.content.decode()
    report = reverse("monitoring:judge-report", args=[judge.pk])
    assert f'href="{report}"' in html and 'data-testid="judge-figures"' in html
    # The judge's account is still no annotator row.
    assert [r["annotator"] for r in response.context["annotators"]] == ["ann1", "ann2", "ann3"]


def test_suggestion_figures_split_agreement_with_the_judge(judge, lead, ml_engineer):
    """ann2's and ann3's judgements are marked as made with the judge's suggestion on screen.
    The judge said a,a,a,a,b,a; ann2 chose a,a,a,b,b,a (kept 5 of 6), ann3 a,b,a,t,b,t (kept 3).
    Kept 8 of 12. With the suggestion: observed 8/12; humans a 6, b 4, tie 2 of 12, the judge a
    10, b 2; chance .5 * 10/12 + 4/12 * 2/12 = .47222; kappa (.66667 - .47222) / .52778 = .3684.
    ann1 (no suggestion) equals the judge: kappa 1 without the suggestion, on 6."""
    project = project_update(
        project=judge.project, actor=ml_engineer, suggestion_judge=judge.annotator
    )
    verdicts = dict(
        Judgement.objects.filter(annotator=judge.annotator).values_list("comparison_id", "choice")
    )
    for judgement in Judgement.objects.filter(
        comparison__project=project, annotator__username__in=["ann2", "ann3"]
    ):
        judgement.suggested_choice = verdicts[judgement.comparison_id]
        judgement.save(update_fields=["suggested_choice"])
    figures = suggestion_report(project=project)
    assert (figures["n_suggested"], figures["kept"], figures["kept_rate"]) == (12, 8, 0.6667)
    assert (figures["kappa_suggested"], figures["n_with"]) == (0.3684, 12)
    assert (figures["kappa_unsuggested"], figures["n_without"]) == (1.0, 6)
    assert figures["per_annotator"] == {
        "ann2": {"suggested": 6, "kept": 5},
        "ann3": {"suggested": 6, "kept": 3},
    }
    assert figures["judge"] == "rm v1"
    html = lead.get(reverse("annotation:agreement", args=[project.slug])).content.decode()
    assert 'data-testid="suggestions"' in html and "0.67 (8 of 12)" in html
    assert "6 (5 kept)" in html

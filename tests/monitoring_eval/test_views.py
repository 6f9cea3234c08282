"""The eval pages through the Django client: the blind screen, results, the panel, the decision."""

import pytest
from django.urls import reverse

from monitoring.models import EvalAssignment, EvalItem, EvalJudgement, EvalRound, StopDecision
from monitoring.services import eval_rounds as eval_services
from monitoring.services.stopping_panel import stopping_panel_refresh
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import BASELINE

pytestmark = pytest.mark.django_db


def test_screen_is_blind_and_submits_from_the_checkpoint_side(open_round, reviewers):
    """The screen shows both answers (markdown rendered) but no model name; "left" on an item whose
    checkpoint was shown left is stored as a checkpoint win; the next item follows."""
    client = logged_in(reviewers[0])
    url = reverse("monitoring:eval-rate", args=[open_round.pk])
    page = client.get(url).content.decode()
    assert "<strong>CKPT</strong>" in page and "BASE answer" in page
    assert BASELINE not in page and "step 4" not in page
    judgement_pk = open_round.items.first().assignments.get().pk
    shown_left = open_round.items.first().assignments.get().shown_left
    response = client.post(
        url, {"assignment": judgement_pk, "pick": "left", "usefulness": "5", "note": " ok ",
              "elapsed_ms": "900"},
    )  # fmt: skip
    assert response.status_code == 302
    made = EvalJudgement.objects.get()
    assert made.preference == ("a" if shown_left == "checkpoint" else "b")
    assert (made.usefulness, made.note, made.elapsed_ms) == (5, "ok", 900)
    assert (
        EvalItem.objects.filter(round=open_round, assignments__reviewer=reviewers[0]).count() == 1
    )
    client.get(url)  # claims the second item
    assert (
        EvalItem.objects.filter(round=open_round, assignments__reviewer=reviewers[0]).count() == 2
    )


def test_an_empty_answer_is_marked_on_the_rating_screen(open_round, reviewers):
    """A checkpoint that answered nothing shows a visible "(empty response)" note, not a blank card."""
    EvalItem.objects.filter(round=open_round).update(checkpoint_text="  \n")
    page = logged_in(reviewers[0]).get(reverse("monitoring:eval-rate", args=[open_round.pk]))
    html = page.content.decode()
    assert html.count('data-testid="empty-response"') == 1 and "BASE answer" in html


def test_annotators_cannot_rate(open_round, annotator):
    assert (
        logged_in(annotator).get(reverse("monitoring:eval-rate", args=[open_round.pk])).status_code
        == 403
    )


def test_results_page_and_stopping_panel_with_a_decision(open_round, reviewers):
    """After 3 reviewers rated everything the results page shows the win rate and both responses;
    the run page shows the panel; a reviewer's roll back is recorded and marks the checkpoint."""
    for reviewer in reviewers[:3]:
        while a := eval_services.eval_claim_next(reviewer=reviewer, round_=open_round):
            checkpoint_side = "left" if a.shown_left == "checkpoint" else "right"
            eval_services.eval_submit(
                assignment=a, reviewer=reviewer, pick=checkpoint_side, usefulness=5
            )
    client = logged_in(reviewers[0])
    page = client.get(reverse("monitoring:eval-round", args=[open_round.pk])).content.decode()
    assert 'data-testid="win-rate">1.000<' in page and "BASE answer" in page
    run = open_round.checkpoint.run
    stopping_panel_refresh(run=run)  # what the task the ratings scheduled does
    page = client.get(reverse("monitoring:run-detail", args=[run.pk])).content.decode()
    assert (
        'data-testid="stopping-panel"' in page
        and 'data-testid="criterion-human_usefulness"' in page
    )
    assert "2.00x the baseline" in page  # 8 tokens against 4
    progress = client.get(reverse("monitoring:eval-progress", args=[open_round.pk])).json()
    assert progress["n"] == 12 and progress["over_time"][-1]["estimate"] == 1.0
    ckpt2 = run.checkpoints.get(step=2)
    response = client.post(
        reverse("monitoring:run-decide", args=[run.pk]),
        {"decision": "rollback", "checkpoint": ckpt2.pk, "note": "step 2 read better"},
    )
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.result_checkpoint == ckpt2
    assert StopDecision.objects.get().note == "step 2 read better"


def test_rounds_page_creates_a_round(
    run_with_checkpoints, reviewers, django_capture_on_commit_callbacks
):
    """The form freezes the prompts and queues generation (eager here would need a worker: the
    enqueue is captured, not run)."""
    client = logged_in(reviewers[0])
    project = run_with_checkpoints.snapshot.export.project
    checkpoint = run_with_checkpoints.checkpoints.get(step=4)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            reverse("monitoring:eval-rounds"),
            {"checkpoint": checkpoint.pk, "project": project.slug, "baseline_model": BASELINE,
             "size": 3, "ci_width": 0.2, "max_new_tokens": 16},
        )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    round_ = EvalRound.objects.get()
    assert (round_.size, round_.sample_size_hint, round_.sampling["max_new_tokens"]) == (3, 97, 16)
    assert len(callbacks) == 1


def test_pages_before_any_rating(open_round, reviewers, ml_engineer):
    """Before a rating: the round page says there is no human rating (no interval), the rounds
    list offers the round for rating,
    the run page's panel says every criterion lacks data, and an engineer sees no decision form."""
    client = logged_in(reviewers[0])
    page = client.get(reverse("monitoring:eval-round", args=[open_round.pk])).content.decode()
    assert "No human rating yet" in page and "No disagreement so far." in page
    assert 'data-testid="no-ratings"' in page and "nan" not in page
    page = client.get(reverse("monitoring:eval-rounds")).content.decode()
    assert reverse("monitoring:eval-rate", args=[open_round.pk]) in page
    run_url = reverse("monitoring:run-detail", args=[open_round.checkpoint.run_id])
    stopping_panel_refresh(run=open_round.checkpoint.run)
    page = client.get(run_url).content.decode()
    assert page.count("not enough data") == 4 and 'data-testid="decision-form"' in page
    page = logged_in(ml_engineer).get(run_url).content.decode()
    assert 'data-testid="stopping-panel"' in page and 'data-testid="decision-form"' not in page


ROLES = ("anonymous", "annotator", "reviewer", "ml_engineer", "superuser")
# (anonymous, annotator, reviewer, ML engineer, superuser), empty GET and POST: the rows these URLs
# need in tests/security/test_authorization_matrix.py's MATRIX.
EXPECTED = {
    "monitoring:eval-rounds": {"get": (302, 403, 200, 200, 200), "post": (302, 403, 200, 200, 200)},
    "monitoring:eval-round": {"get": (302, 403, 200, 200, 200), "post": (302, 403, 200, 200, 200)},
    "monitoring:eval-rate": {"get": (302, 403, 200, 403, 200), "post": (302, 403, 404, 403, 404)},
    "monitoring:run-decide": {"get": (302, 405, 405, 405, 405), "post": (302, 403, 302, 403, 302)},
    "monitoring:eval-progress": {
        "get": (302, 403, 200, 200, 200),
        "post": (302, 403, 200, 200, 200),
    },
}


def test_status_per_role_of_the_eval_urls(open_round, annotator, reviewers, ml_engineer):
    """Only reviewers (and superusers) rate and decide; engineers see rounds and results; an empty
    POST never errors (a rating without assignment is a 404)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    users = {"annotator": annotator, "reviewer": reviewers[0], "ml_engineer": ml_engineer,
             "superuser": admin}  # fmt: skip
    args = {
        "monitoring:eval-rounds": [],
        "monitoring:eval-round": [open_round.pk],
        "monitoring:eval-rate": [open_round.pk],
        "monitoring:run-decide": [open_round.checkpoint.run_id],
        "monitoring:eval-progress": [open_round.pk],
    }
    for name, methods in EXPECTED.items():
        url = reverse(name, args=args[name])
        for method, expected in methods.items():
            got = []
            for role in ROLES:
                client = Client(raise_request_exception=False)
                if role != "anonymous":
                    client.force_login(users[role])
                got.append(getattr(client, method)(url).status_code)
            assert tuple(got) == expected, (name, method)


def test_the_round_closes_itself_when_every_item_has_its_ratings(open_round, reviewers):
    """reviewers_per_item ratings on every item: nothing is left to hand out, the round closes."""
    per_item = open_round.reviewers_per_item
    for reviewer in reviewers[:per_item]:
        while True:
            assignment = eval_services.eval_claim_next(reviewer=reviewer, round_=open_round)
            if assignment is None:
                break
            open_round.refresh_from_db()
            assert open_round.status == "open"  # not before the last rating
            eval_services.eval_submit(
                assignment=assignment, reviewer=reviewer, pick="tie", usefulness=3
            )
    open_round.refresh_from_db()
    assert open_round.status == "closed"
    assert EvalJudgement.objects.filter(assignment__item__round=open_round).count() == (
        open_round.items.count() * per_item
    )


def test_eval_rounds_are_in_the_navigation_of_reviewers_and_engineers(
    open_round, reviewers, ml_engineer, annotator
):
    url = reverse("monitoring:eval-rounds")
    for user in (reviewers[0], ml_engineer):
        assert f'href="{url}"' in logged_in(user).get(reverse("home"), follow=True).content.decode()
    assert f'href="{url}"' not in logged_in(annotator).get("/", follow=True).content.decode()


def test_the_baseline_is_chosen_from_the_registry(run_with_checkpoints, reviewers):
    """A name that is not a generative model of the registry is refused by the form, nothing made."""
    checkpoint = run_with_checkpoints.checkpoints.get(step=4)
    response = logged_in(reviewers[0]).post(
        reverse("monitoring:eval-rounds"),
        {"checkpoint": checkpoint.pk, "project": run_with_checkpoints.snapshot.export.project.slug,
         "baseline_model": "all-minilm-l6-v2", "size": 3, "ci_width": 0.2, "max_new_tokens": 16},
    )  # fmt: skip
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not EvalRound.objects.exists()


def test_the_rating_screen_skips_identical_answers_and_says_when_the_round_closed(
    open_round, reviewers
):
    """With one reviewer per item and items 1 and 3 answered identically, the reviewer is shown
    items 0 and 2 only; the last rating closes the round and the next page says so; the results
    page says how many items had identical answers and counts each once, as a tie, after the
    ratings count (2 ratings of 2 items)."""
    EvalRound.objects.filter(pk=open_round.pk).update(reviewers_per_item=1)
    for item in open_round.items.filter(position__in=[1, 3]):
        EvalItem.objects.filter(pk=item.pk).update(baseline_text=f"**CKPT** answer {item.position}")
    client = logged_in(reviewers[0])
    url = reverse("monitoring:eval-rate", args=[open_round.pk])
    shown = []
    for _ in range(2):
        client.get(url)
        assignment = EvalAssignment.objects.get(item__round=open_round, judgement__isnull=True)
        shown.append(assignment.item.position)
        response = client.post(
            url, {"assignment": assignment.pk, "pick": "tie", "usefulness": "3"}, follow=True
        )
    assert shown == [0, 2]
    page = response.content.decode()
    assert "That was the last rating" in page and "This round is closed" in page
    page = client.get(reverse("monitoring:eval-round", args=[open_round.pk])).content.decode()
    assert "2 items had identical answers: never shown to reviewers, each counts" in page
    assert (
        "2 ratings of 2 items</strong> and 2 items with identical answers counted as ties" in page
    )
    assert page.count('data-testid="identical-item"') == 2

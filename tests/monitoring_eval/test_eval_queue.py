"""Eval rounds on the shared work queue: the ``eval_rating`` task type is registered by monitoring
(hosted, not a project's task type) and validates answers in stored terms; claims follow the
queue's pair rule for sides; an assignment left unanswered for 30 minutes is handed to someone
else and its late answer refused; the plug-in's form, agreement and export."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.template.loader import get_template
from django.urls import reverse
from django.utils import timezone

from annotation.work_queue.plugins import AnswerError
from annotation.work_queue.registry import HOSTED, REGISTRY, task_type_named
from common.roles import REVIEWER
from monitoring.eval_rating import assignment_order
from monitoring.models import EvalAssignment, EvalJudgement, EvalRound
from monitoring.services import eval_rounds as eval_services
from monitoring.services.eval_rounds import EvalError
from tests.factories import UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db


def test_monitoring_registers_the_eval_rating_type_as_a_hosted_type():
    """Registered from MonitoringConfig.ready: found by name, never a project's task type."""
    plugin = task_type_named("eval_rating")
    assert HOSTED["eval_rating"] is plugin and "eval_rating" not in REGISTRY
    assert plugin.responses == (2, 2) and plugin.export_formats == ("judgements",)
    assert {"1", "2", "3", "Enter"} <= set(plugin.keys)
    assert get_template(plugin.template) is not None


@pytest.mark.parametrize(
    ("shown_left", "pick", "preference"),
    [
        ("checkpoint", "left", "a"),
        ("checkpoint", "right", "b"),
        ("baseline", "left", "b"),
        ("baseline", "right", "a"),
        ("baseline", "tie", "tie"),
    ],
)
def test_validate_stores_the_pick_from_the_checkpoint_side(shown_left, pick, preference):
    """Order [0, 1] shows the checkpoint (stored position 0) on the left, [1, 0] the baseline."""
    plugin = task_type_named("eval_rating")
    order = assignment_order(shown_left)
    assert order == ([0, 1] if shown_left == "checkpoint" else [1, 0])
    got = plugin.validate(None, {"pick": pick, "usefulness": 4}, order)
    assert got == {"preference": preference, "usefulness": 4}


@pytest.mark.parametrize(
    ("answer", "order", "message"),
    [
        ({"pick": "both_bad", "usefulness": 3}, [0, 1], "pick must be one of"),
        ({"pick": "left", "usefulness": 0}, [0, 1], "from 1 to 5, got 0"),
        ({"pick": "left", "usefulness": "3"}, [0, 1], "from 1 to 5, got '3'"),
        ({"pick": "left", "usefulness": True}, [0, 1], "from 1 to 5, got True"),
        ({"pick": "left", "usefulness": 3}, [0, 2], "two answers"),
    ],
)
def test_validate_refuses_bad_answers(answer, order, message):
    with pytest.raises(AnswerError, match=message):
        task_type_named("eval_rating").validate(None, answer, order)


def test_the_form_is_read_by_the_plug_in():
    plugin = task_type_named("eval_rating")
    assert plugin.answer_from_form(None, {"pick": "tie", "usefulness": " 4 "}, 2) == {
        "pick": "tie",
        "usefulness": 4,
    }
    assert plugin.answer_from_form(None, {}, 2) == {"pick": "", "usefulness": ""}


def _rate_all(round_, reviewer) -> list[EvalAssignment]:
    claimed = []
    while (
        assignment := eval_services.eval_claim_next(reviewer=reviewer, round_=round_)
    ) is not None:
        claimed.append(assignment)
        eval_services.eval_submit(
            assignment=assignment, reviewer=reviewer, pick="tie", usefulness=3
        )
    return claimed


def test_sides_follow_the_queue_pair_rule(open_round, reviewers):
    """Item positions 0-3: the first reviewer of each item (k = 0) sees the checkpoint on the left
    at even positions, the second (k = 1) at odd ones: side_for(position, taken)."""
    first = _rate_all(open_round, reviewers[0])
    second = _rate_all(open_round, reviewers[1])
    assert [a.item.position for a in first] == [0, 1, 2, 3]
    assert [a.shown_left for a in first] == ["checkpoint", "baseline"] * 2
    assert [a.shown_left for a in second] == ["baseline", "checkpoint"] * 2


def test_an_unanswered_assignment_is_handed_on_after_30_minutes(open_round, reviewers):
    """One reviewer per item: rev0 holds item 0 for 31 minutes while rev1 rates items 1-3; rev2
    then finds item 0 free again, and rev0's late answer is refused, nothing written."""
    EvalRound.objects.filter(pk=open_round.pk).update(reviewers_per_item=1)
    open_round.refresh_from_db()
    held = eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round)
    assert held.item.position == 0
    assert [a.item.position for a in _rate_all(open_round, reviewers[1])] == [1, 2, 3]
    assert eval_services.eval_claim_next(reviewer=reviewers[2], round_=open_round) is None
    EvalAssignment.objects.filter(pk=held.pk).update(
        created_at=timezone.now() - timedelta(minutes=31)
    )
    again = eval_services.eval_claim_next(reviewer=reviewers[2], round_=open_round)
    assert again.item_id == held.item_id and not EvalAssignment.objects.filter(pk=held.pk).exists()
    with pytest.raises(EvalError, match="no longer assigned"):
        eval_services.eval_submit(assignment=held, reviewer=reviewers[0], pick="tie", usefulness=3)
    assert EvalJudgement.objects.filter(assignment__item__round=open_round).count() == 3


def test_a_reviewer_gets_their_own_unanswered_assignment_back_however_old(open_round, reviewers):
    held = eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round)
    EvalAssignment.objects.filter(pk=held.pk).update(created_at=timezone.now() - timedelta(hours=2))
    assert eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round) == held


def test_the_plug_in_exports_and_measures_agreement_per_round(open_round, reviewers):
    """Two reviewers rate the 4 items (usefulness 3 each, ties): 8 rows in arrival order; the
    round's agreement counts 8 judgements by 2 reviewers (alpha NaN: no variation)."""
    for reviewer in reviewers[:2]:
        _rate_all(open_round, reviewer)
    plugin = task_type_named("eval_rating")
    rows = plugin.export_rows(open_round.project, "judgements")
    assert len(rows) == 8 and {r["round"] for r in rows} == {open_round.pk}
    assert rows[0]["reviewer"] == reviewers[0].username and rows[0]["preference"] == "tie"
    assert {r["shown_left"] for r in rows} == {"checkpoint", "baseline"}
    report = plugin.agreement(open_round.project)
    assert [(r["round"], r["n_judgements"], r["n_reviewers"]) for r in report["rounds"]] == [
        (open_round.pk, 8, 2)
    ]
    with pytest.raises(AnswerError, match="judgements"):
        plugin.export_rows(open_round.project, "pairs")


def test_a_bad_usefulness_from_the_screen_is_refused_by_the_plug_in(open_round, reviewers):
    """The form's "abc" reaches the plug-in's validation: its message is shown, nothing stored."""
    client = logged_in(reviewers[0])
    url = reverse("monitoring:eval-rate", args=[open_round.pk])
    client.get(url)
    assignment = EvalAssignment.objects.get(item__round=open_round)
    page = client.post(
        url, {"assignment": assignment.pk, "pick": "left", "usefulness": "abc"}, follow=True
    ).content.decode()
    assert "usefulness must be an integer from 1 to 5" in page
    assert not EvalJudgement.objects.exists()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_concurrent_reviewers_never_over_assign_and_keep_the_sides(open_round, reviewers):
    """8 reviewer threads claim and rate at once, 3 reviewers per item, 4 items: every item ends
    with exactly 3 distinct reviewers (12 ratings), and each item's sides are those of
    side_for(position, k) for k = 0, 1, 2, as when reviewers come one by one."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks with SKIP LOCKED need PostgreSQL (make test uses it)")
    crowd = [*reviewers, *(UserFactory(role=REVIEWER) for _ in range(4))]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(crowd))

    def work(reviewer) -> None:
        try:
            barrier.wait()
            round_ = EvalRound.objects.get(pk=open_round.pk)
            _rate_all(round_, reviewer)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(r,)) for r in crowd]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert EvalJudgement.objects.filter(assignment__item__round=open_round).count() == 12
    for item in open_round.items.all():
        rows = list(item.assignments.values_list("reviewer", "shown_left"))
        assert len({reviewer for reviewer, _ in rows}) == 3 == len(rows)
        expected = ["checkpoint" if (item.position + k) % 2 == 0 else "baseline" for k in range(3)]
        assert sorted(side for _, side in rows) == sorted(expected)

"""The work queue for rating and ranking items: claims, overlap, leases, skips, gold items,
repeats and display orders; answers validated by the task-type plug-ins and stored in stored
terms; a refused answer changes nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from annotation.models import TaskAnswer, TaskItem, TaskLease
from annotation.services.task_agreement import task_agreement
from annotation.work_queue import items as queue
from annotation.work_queue.plugins import AnswerError, competition_ranks
from annotation.work_queue.policy import display_order, due, repeat_order, side_for
from annotation.work_queue.registry import REGISTRY, register, task_type_named
from tests.helpers.task_items import annotators, ranking_project, rating_project

pytestmark = pytest.mark.django_db

RATING = {"scores": {"helpfulness": "4", "correctness": 2}, "thumbs": "up"}


def test_display_orders_rotate_so_every_response_visits_every_slot():
    """K annotators of an item see K rotations of one permutation: each response once per slot."""
    orders = [display_order(17, served, 4) for served in range(4)]
    for slot in range(4):
        assert sorted(order[slot] for order in orders) == [0, 1, 2, 3]
    assert all(sorted(order) == [0, 1, 2, 3] for order in orders)
    assert display_order(17, 4, 4) == orders[0]
    assert display_order(5, 0, 1) == [0]
    assert repeat_order([2, 0, 1]) == [1, 0, 2]
    with pytest.raises(ValueError):
        display_order(1, 0, 0)


def test_pair_sides_and_due_are_the_shared_rules():
    assert [side_for(4, s) for s in range(3)] == ["a", "b", "a"]
    assert side_for(5, 0) == "b"
    assert [due(3, done) for done in range(7)] == [False, False, True, False, False, True, False]
    assert not due(0, 5)


def test_registry_holds_the_three_types_and_refuses_a_second_of_a_name():
    assert set(REGISTRY) == {"pairwise", "rating", "ranking"}
    with pytest.raises(ValueError, match="already registered"):
        register(task_type_named("rating"))
    with pytest.raises(AnswerError, match="unknown task type"):
        task_type_named("essay")


def test_each_item_gets_exactly_overlap_distinct_annotators():
    project, items = rating_project(2, overlap=2)
    users = annotators(project, 4)
    for user in users:
        while (lease := queue.item_claim(annotator=user, project=project)) is not None:
            queue.item_submit(annotator=user, lease_id=lease.pk, answer=RATING)
    for item in items:
        item.refresh_from_db()
        assert item.taken == 2
        assert item.answers.values("annotator").distinct().count() == 2
    assert TaskLease.objects.filter(annotator__in=users[2:]).count() == 0  # nothing left


def test_reload_returns_the_same_lease_and_order():
    project, _ = ranking_project(2)
    (user,) = annotators(project, 1)
    first = queue.item_claim(annotator=user, project=project)
    again = queue.item_claim(annotator=user, project=project)
    assert again.pk == first.pk and again.order == first.order


def test_ranking_answers_map_through_the_display_order():
    project, _ = ranking_project(1, k=4)
    (user,) = annotators(project, 1)
    lease = queue.item_claim(annotator=user, project=project)
    screen = ["2", "4", "1", "3"]  # the rank of the response in each screen slot
    answer = queue.item_submit(annotator=user, lease_id=lease.pk, answer={"ranks": screen})
    for slot, position in enumerate(lease.order):
        assert answer.ranks[position] == int(screen[slot])
    assert answer.order == lease.order
    shown = queue.item_screen(lease)
    assert [entry["position"] for entry in shown] == lease.order
    assert shown[0]["response"].text.endswith(f".{lease.order[0]}")


def test_ranking_ties_only_when_the_project_allows_them():
    project, _ = ranking_project(1, k=3, allow_ties=False)
    (user,) = annotators(project, 1)
    lease = queue.item_claim(annotator=user, project=project)
    with pytest.raises(AnswerError, match="does not allow ties"):
        queue.item_submit(annotator=user, lease_id=lease.pk, answer={"ranks": [1, 1, 2]})
    assert not TaskAnswer.objects.exists()
    assert TaskLease.objects.get(pk=lease.pk).status == "active"

    tied, _ = ranking_project(1, k=3, allow_ties=True)
    (other,) = annotators(tied, 1)
    lease = queue.item_claim(annotator=other, project=tied)
    answer = queue.item_submit(annotator=other, lease_id=lease.pk, answer={"ranks": [1, 1, 2]})
    assert sorted(answer.ranks) == [1, 1, 3]  # stored as competition ranks


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"ranks": [1, 2, 3]}, "rank all 4"),
        ({"ranks": [1, 2, 3, 9]}, "from 1 to 4"),
        ({"ranks": ["1", "x", "3", "4"]}, "whole number"),
    ],
)
def test_bad_rankings_are_refused_and_change_nothing(answer, message):
    project, _ = ranking_project(1, k=4)
    (user,) = annotators(project, 1)
    lease = queue.item_claim(annotator=user, project=project)
    with pytest.raises(AnswerError, match=message):
        queue.item_submit(annotator=user, lease_id=lease.pk, answer=answer)
    assert not TaskAnswer.objects.exists()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"scores": {"helpfulness": 4}, "thumbs": "up"}, "score correctness"),
        ({"scores": {"helpfulness": 4, "correctness": 6}, "thumbs": "up"}, "from 1 to 5"),
        ({"scores": {"helpfulness": 4, "correctness": 2, "tone": 3}, "thumbs": "up"}, "unknown"),
        ({"scores": {"helpfulness": 4, "correctness": 2}}, "thumbs up or down"),
    ],
)
def test_bad_ratings_are_refused_and_change_nothing(answer, message):
    project, _ = rating_project(1)
    (user,) = annotators(project, 1)
    lease = queue.item_claim(annotator=user, project=project)
    with pytest.raises(AnswerError, match=message):
        queue.item_submit(annotator=user, lease_id=lease.pk, answer=answer)
    assert not TaskAnswer.objects.exists()


def test_rating_is_stored_and_a_second_submission_returns_it_unchanged():
    project, _ = rating_project(1)
    (user,) = annotators(project, 1)
    lease = queue.item_claim(annotator=user, project=project)
    first = queue.item_submit(annotator=user, lease_id=lease.pk, answer=RATING, elapsed_ms=1200)
    assert first.scores == {"helpfulness": 4, "correctness": 2}
    assert first.thumbs is True and first.order == [0] and first.elapsed_ms == 1200
    other = {"scores": {"helpfulness": 1, "correctness": 1}, "thumbs": "down"}
    assert queue.item_submit(annotator=user, lease_id=lease.pk, answer=other).pk == first.pk
    assert TaskAnswer.objects.get().thumbs is True


def test_thumbs_only_project_takes_no_scores():
    project, _ = rating_project(1, thumbs=True)
    project.rating_aspects = []
    project.save()
    (user,) = annotators(project, 1)
    lease = queue.item_claim(annotator=user, project=project)
    answer = queue.item_submit(annotator=user, lease_id=lease.pk, answer={"thumbs": "down"})
    assert answer.thumbs is False and answer.scores == {}


def test_skip_frees_the_slot_and_never_returns_to_that_annotator():
    project, _ = rating_project(2, overlap=1)
    skipper, other = annotators(project, 2)
    lease = queue.item_claim(annotator=skipper, project=project)
    queue.item_skip(annotator=skipper, lease_id=lease.pk)
    assert queue.item_claim(annotator=skipper, project=project).item_id != lease.item_id
    assert queue.item_claim(annotator=other, project=project).item_id == lease.item_id
    with pytest.raises(AnswerError, match="no longer assigned"):
        queue.item_submit(annotator=skipper, lease_id=lease.pk, answer=RATING)


def test_an_expired_lease_returns_its_slot_when_nothing_else_is_free():
    project, (item,) = rating_project(1, overlap=1)
    slow, fast = annotators(project, 2)
    lease = queue.item_claim(annotator=slow, project=project)
    assert queue.item_claim(annotator=fast, project=project) is None
    TaskLease.objects.filter(pk=lease.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert queue.item_claim(annotator=fast, project=project).item_id == item.pk
    assert not TaskLease.objects.filter(pk=lease.pk).exists()


def test_gold_items_go_to_everyone_outside_the_overlap():
    project, items = ranking_project(4, k=3, overlap=2, gold_every=2)
    gold = items[-1]
    gold.gold = {"ranks": [1, 2, 3]}
    gold.save()
    users = annotators(project, 2)
    for user in users:
        kinds = []
        while (lease := queue.item_claim(annotator=user, project=project)) is not None:
            kinds.append((lease.kind, lease.item_id))
            queue.item_submit(annotator=user, lease_id=lease.pk, answer={"ranks": [1, 2, 3]})
        assert ("gold", gold.pk) in kinds
    assert TaskAnswer.objects.filter(item=gold, gold=True).count() == 2
    gold.refresh_from_db()
    assert gold.taken == 0
    report = task_agreement(project=project)
    assert [row["n"] for row in report["gold"].values()] == [1, 1]
    # Each annotator ranked [1, 2, 3] on screen; the gold is [1, 2, 3] in stored terms.
    taus = [row["mean_tau"] for row in report["gold"].values()]
    assert all(-1 <= tau <= 1 for tau in taus)


def test_repeats_show_an_answered_item_again_in_the_reversed_order():
    project, _ = ranking_project(8, k=3, overlap=1, repeat_every=7)
    (user,) = annotators(project, 1)
    seen = []
    while (lease := queue.item_claim(annotator=user, project=project)) is not None:
        seen.append(lease)
        queue.item_submit(annotator=user, lease_id=lease.pk, answer={"ranks": [1, 2, 3]})
    repeats = [lease for lease in seen if lease.kind == "repeat"]
    assert len(repeats) == 1
    first = TaskAnswer.objects.get(item_id=repeats[0].item_id, repeat=False)
    assert repeats[0].order == list(reversed(first.order))
    assert TaskAnswer.objects.filter(repeat=True).count() == 1


def test_a_pairwise_project_does_not_claim_items():
    from tests.factories import ProjectFactory

    project = ProjectFactory()
    (user,) = annotators(project, 1)
    with pytest.raises(AnswerError, match="pairwise"):
        queue.item_claim(annotator=user, project=project)


def test_paused_members_and_archived_projects_claim_nothing():
    project, _ = rating_project(2)
    (user,) = annotators(project, 1)
    project.archived_at = timezone.now()
    project.save()
    assert queue.item_claim(annotator=user, project=project) is None


def test_competition_ranks():
    assert competition_ranks([1, 1, 2]) == [1, 1, 3]
    assert competition_ranks([3, 1, 2, 1]) == [4, 1, 3, 1]


def test_items_without_overlap_slots_are_not_taken():
    project, items = rating_project(1, overlap=1)
    TaskItem.objects.filter(pk=items[0].pk).update(taken=1)
    (user,) = annotators(project, 1)
    assert queue.item_claim(annotator=user, project=project) is None

"""The pair switch without a page load: the next pair is reserved with its own lease while the
current one is read; the JSON answers of submit, skip and ahead; the history and its edits; the
progress numbers."""

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from annotation.models import Assignment, Judgement, Side
from annotation.selectors.labelling import BATCH_SIZE, labelling_history, labelling_progress
from annotation.services import labelling
from annotation.services.labelling import Verdict
from common.roles import ANNOTATOR
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db
JSON = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()  # the open-pairs count is cached a few seconds per project


def _project(n: int, **fields):
    fields = {"gold_every": 0, "repeat_every": 0, **fields}
    project = ProjectFactory(**fields)
    comparisons = [ComparisonFactory(project=project) for _ in range(n)]
    return project, comparisons


def _annotators(project, n: int):
    users = [UserFactory(role=ANNOTATOR) for _ in range(n)]
    project.members.add(*users)
    return users


def _submit(user, assignment, pick="left", strength=1):
    return labelling.judgement_submit(
        annotator=user, assignment_id=assignment.pk, verdict=Verdict(pick, strength)
    )


def test_the_next_pair_is_reserved_once_and_shown_after_the_current_one():
    """Reserving is idempotent (one pair ahead, however often asked); a reload still shows the
    current pair; once it is judged, the reserved pair is the current one."""
    project, comparisons = _project(4, overlap=1)
    (user,) = _annotators(project, 1)
    current = labelling.assignment_claim(annotator=user, project=project)
    ahead = labelling.assignment_reserve_next(
        annotator=user, project=project, current_id=current.pk
    )
    again = labelling.assignment_reserve_next(
        annotator=user, project=project, current_id=current.pk
    )
    assert (current.comparison_id, ahead.comparison_id) == (comparisons[0].pk, comparisons[1].pk)
    assert again.pk == ahead.pk
    assert labelling.assignment_claim(annotator=user, project=project).pk == current.pk
    assert Assignment.objects.filter(annotator=user, status="active").count() == 2
    _submit(user, current)
    assert labelling.assignment_claim(annotator=user, project=project).pk == ahead.pk


def test_a_reserved_lease_lasts_twice_as_long_and_is_released_when_it_expires():
    """The reserved pair's lease also covers the reading of the current pair; abandoned, it goes
    back to the pool like any lease."""
    project, comparisons = _project(2, overlap=1, lease_minutes=10)
    alice, bob = _annotators(project, 2)
    current = labelling.assignment_claim(annotator=alice, project=project)
    ahead = labelling.assignment_reserve_next(
        annotator=alice, project=project, current_id=current.pk
    )
    minutes = (ahead.expires_at - timezone.now()).total_seconds() / 60
    assert 19 < minutes <= 20
    assert labelling.assignment_claim(annotator=bob, project=project) is None  # both taken
    Assignment.objects.filter(pk=ahead.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    cache.clear()  # the release check runs at most every few seconds
    taken_over = labelling.assignment_claim(annotator=bob, project=project)
    assert taken_over.comparison_id == comparisons[1].pk


def test_reserving_ahead_never_exceeds_the_overlap_and_keeps_sides_alternating():
    """Two annotators each holding a current and a reserved pair: every comparison has at most
    ``overlap`` holders, and its holders see opposite sides on the left."""
    project, _ = _project(3, overlap=2)
    users = _annotators(project, 3)
    held = {}
    for user in users:
        current = labelling.assignment_claim(annotator=user, project=project)
        ahead = labelling.assignment_reserve_next(
            annotator=user, project=project, current_id=current.pk
        )
        held[user.pk] = [a for a in (current, ahead) if a is not None]
    per_comparison: dict[int, list[str]] = {}
    for assignments in held.values():
        for a in assignments:
            per_comparison.setdefault(a.comparison_id, []).append(a.shown_left)
    # c0 and c1 go to the first two (current and reserved), c2 to the third: the last slot of c2
    # is left for someone who holds fewer than two pairs.
    assert sorted(len(sides) for sides in per_comparison.values()) == [1, 2, 2]
    assert all(
        sorted(sides) == [Side.A, Side.B] for sides in per_comparison.values() if len(sides) == 2
    )


def test_gold_items_fall_where_they_would_without_reserving():
    """gold_every=3: the third pair shown is the gold item, also when it was reserved ahead."""
    project, _ = _project(5, overlap=1, gold_every=3)
    gold = ComparisonFactory(project=project, gold="a", queue_position=-1)
    (user,) = _annotators(project, 1)
    shown = []
    current = labelling.assignment_claim(annotator=user, project=project)
    for _ in range(3):
        labelling.assignment_reserve_next(annotator=user, project=project, current_id=current.pk)
        shown.append(current.comparison_id)
        _submit(user, current)
        current = labelling.assignment_claim(annotator=user, project=project)
    assert shown[2] == gold.pk
    assert gold.pk not in shown[:2]


def test_json_submit_moves_on_and_reserves_the_pair_after():
    """A submission from the screen's script answers with the current pair (the one reserved
    before) and a newly reserved one, in screen order, with the progress bars."""
    project, comparisons = _project(3, overlap=1)
    (user,) = _annotators(project, 1)
    client = logged_in(user)
    base = f"/annotation/p/{project.slug}/label/"
    first = client.post(base + "ahead/", **JSON).json()
    assert first["current"]["assignment"] != first["next"]["assignment"]
    current = Assignment.objects.get(pk=first["current"]["assignment"])
    answer = client.post(
        first["current"]["submit_url"], {"pick": "right", "strength": "2"}, **JSON
    ).json()
    assert answer["error"] == ""
    assert answer["current"]["assignment"] == first["next"]["assignment"]
    third = Assignment.objects.get(pk=answer["next"]["assignment"])
    assert third.comparison_id == comparisons[2].pk
    judgement = Judgement.objects.get(annotator=user)
    other = Side.B if current.shown_left == Side.A else Side.A
    assert (judgement.comparison_id, judgement.choice, judgement.strength) == (
        current.comparison_id,
        other,
        2,
    )
    assert 'data-testid="done-count">1<' in answer["progress_html"]
    # The pair's HTML has the responses in screen order.
    left_text = (
        third.comparison.response_a if third.shown_left == Side.A else third.comparison.response_b
    ).text
    html = answer["next"]["html"]
    assert html.index("Left") < html.index(left_text.split()[0])


def test_json_skip_and_the_end_of_the_queue():
    """Skipping from the script moves on too; with nothing left, ``current`` is null."""
    project, _ = _project(1, overlap=1)
    (user,) = _annotators(project, 1)
    client = logged_in(user)
    base = f"/annotation/p/{project.slug}/label/"
    first = client.post(base + "ahead/", **JSON).json()
    assert first["next"] is None
    answer = client.post(first["current"]["skip_url"], **JSON).json()
    assert answer["current"] is None
    assert Assignment.objects.get(annotator=user).status == "skipped"


def test_json_submit_of_a_pair_no_longer_held_says_so_and_moves_on():
    project, _ = _project(2, overlap=1)
    alice, bob = _annotators(project, 2)
    bobs = labelling.assignment_claim(annotator=bob, project=project)
    client = logged_in(alice)
    answer = client.post(
        f"/annotation/p/{project.slug}/label/{bobs.pk}/", {"pick": "left"}, **JSON
    ).json()
    assert "no longer assigned" in answer["error"]
    assert not Judgement.objects.exists()
    assert answer["current"]["assignment"] != bobs.pk


def test_json_submit_costs_a_bounded_number_of_queries(django_assert_max_num_queries):
    """Submit, move on, reserve the next and count the progress in one request: the session's user
    and the membership (2), the submission (3, and 2 savepoints), the current pair (1 + its screen
    1, 2 savepoints), the reservation (4, the membership's pause check and lock included, + its
    screen 1, 2 savepoints), the progress (1; the open count is cached): 19 in a test's
    transaction, 13 round trips in production (no savepoints)."""
    project, _ = _project(5, overlap=1)
    (user,) = _annotators(project, 1)
    client = logged_in(user)
    first = client.post(f"/annotation/p/{project.slug}/label/ahead/", **JSON).json()
    with django_assert_max_num_queries(19):
        client.post(first["current"]["submit_url"], {"pick": "left"}, **JSON)


def test_progress_today_counts_only_pairs_labelled_on_the_screen():
    """Imported (or simulated) judgements are the annotator's but not today's work, nor part of
    the batch; the next batch starts at 0 of the full size after BATCH_SIZE pairs, never shrunk to
    what happens to be left (that would move as others take pairs)."""
    project, comparisons = _project(BATCH_SIZE + 5, overlap=1)
    (user,) = _annotators(project, 1)
    for comparison in comparisons[-3:]:
        JudgementFactory(comparison=comparison, annotator=user)  # imported: no assignment
    for _ in range(BATCH_SIZE):
        _submit(user, labelling.assignment_claim(annotator=user, project=project))
    cache.clear()
    progress = labelling_progress(annotator=user, project=project)
    assert (progress.done, progress.done_today, progress.labelled) == (
        BATCH_SIZE + 3,
        BATCH_SIZE,
        BATCH_SIZE,
    )
    assert (progress.batch_number, progress.batch_done, progress.batch_size) == (2, 0, BATCH_SIZE)
    # 25 pairs: 20 labelled, 3 imported, 2 left (open and untouched)
    assert progress.available == 2


def test_pairs_left_do_not_move_while_an_earlier_judgement_is_edited():
    """The count includes the pairs the annotator holds, so the edit screen shows the same count
    as the labelling screen."""
    project, _ = _project(6, overlap=1)
    (user,) = _annotators(project, 1)
    client = logged_in(user)
    base = f"/annotation/p/{project.slug}/label/"
    first = client.post(base + "ahead/", **JSON).json()
    client.post(first["current"]["submit_url"], {"pick": "left"}, **JSON)
    on_labelling = labelling_progress(annotator=user, project=project).available
    response = client.get(base + "last/")
    assert response.status_code == 200
    assert response.context["progress"].available == on_labelling == 5


def test_history_lists_the_last_judgements_and_any_of_them_can_be_changed():
    """The history lists the annotator's judgements from the screen (newest first, imported ones
    left out); one picked from it is re-opened and changed, its shown side kept."""
    project, comparisons = _project(25, overlap=1)
    alice, _bob = _annotators(project, 2)
    JudgementFactory(comparison=comparisons[-1], annotator=alice)  # imported
    judged = []
    for _ in range(22):
        assignment = labelling.assignment_claim(annotator=alice, project=project)
        judged.append(_submit(alice, assignment, "left", 1))
    entries = labelling_history(annotator=alice, project=project)
    assert [e.judgement_id for e in entries] == [j.pk for j in reversed(judged)]
    assert all(e.pick == "left" and e.strength == 1 for e in entries)

    old = judged[2]
    client = logged_in(alice)
    base = f"/annotation/p/{project.slug}/label/"
    page = client.get(base + f"last/?judgement={old.pk}")
    assert page.status_code == 200 and page.context["editing"].pk == old.pk
    assert page.context["current_pick"] == "left"
    client.post(base + "last/", {"judgement": str(old.pk), "pick": "right", "strength": "3"})
    old.refresh_from_db()
    other = Side.B if old.shown_left == Side.A else Side.A
    assert (old.choice, old.strength) == (other, 3)
    entry = next(
        e for e in labelling_history(annotator=alice, project=project) if e.judgement_id == old.pk
    )
    assert (entry.pick, entry.strength) == ("right", 3)

    history = client.get(base + "history/").json()["html"]
    assert history.count("<li") == len(judged)
    assert f"?judgement={old.pk}" in history


def test_nobody_edits_or_sees_another_annotators_judgement_through_the_history():
    project, _ = _project(2, overlap=1)
    alice, bob = _annotators(project, 2)
    bobs = _submit(bob, labelling.assignment_claim(annotator=bob, project=project), "left", 1)
    before = (bobs.choice, bobs.strength, bobs.updated_at)
    client = logged_in(alice)
    base = f"/annotation/p/{project.slug}/label/"
    response = client.get(base + f"last/?judgement={bobs.pk}")
    assert response.status_code == 302
    client.post(base + "last/", {"judgement": str(bobs.pk), "pick": "right", "strength": "3"})
    bobs.refresh_from_db()
    assert (bobs.choice, bobs.strength, bobs.updated_at) == before
    assert "judgement=" not in client.get(base + "history/").json()["html"]
    assert client.get(base + "last/?judgement=nope").status_code == 302


def test_the_done_page_keeps_the_history_within_reach():
    """With nothing left, the page lists the annotator's last judgements, each re-openable."""
    project, _ = _project(2, overlap=1)
    (user,) = _annotators(project, 1)
    judged = [
        _submit(user, labelling.assignment_claim(annotator=user, project=project)) for _ in range(2)
    ]
    page = logged_in(user).get(f"/annotation/p/{project.slug}/label/").content.decode()
    assert "Nothing left to label" in page
    for judgement in judged:
        assert f"?judgement={judgement.pk}" in page

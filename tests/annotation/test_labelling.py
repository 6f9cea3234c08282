"""The labelling loop's services: claims respect the overlap under concurrency, leases expire, sides
alternate, submissions are idempotent, skips and edits behave."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from annotation.models import Assignment, Comparison, Judgement, RepeatJudgement
from annotation.selectors.labelling import judgement_last
from annotation.services import labelling
from annotation.services.labelling import LabellingError, Verdict
from common.roles import ANNOTATOR
from tests.factories import ComparisonFactory, ProjectFactory, UserFactory
from tests.helpers.locks import claim_while_held

pytestmark = pytest.mark.django_db


def _project(n: int, **fields):
    project = ProjectFactory(gold_every=0, repeat_every=0, **fields)
    comparisons = [ComparisonFactory(project=project) for _ in range(n)]
    return project, comparisons


def _annotators(project, n: int):
    users = [UserFactory(role=ANNOTATOR) for _ in range(n)]
    project.members.add(*users)
    return users


def _label(user, project, pick="left", strength=1):
    assignment = labelling.assignment_claim(annotator=user, project=project)
    assert assignment is not None
    labelling.judgement_submit(
        annotator=user, assignment_id=assignment.pk, verdict=Verdict(pick, strength), elapsed_ms=900
    )
    return assignment


def test_claims_follow_queue_order_and_reload_returns_the_same_pair():
    project, comparisons = _project(3)
    comparisons[2].queue_position = -1
    comparisons[2].save()
    (user,) = _annotators(project, 1)
    first = labelling.assignment_claim(annotator=user, project=project)
    assert first.comparison == comparisons[2]
    assert labelling.assignment_claim(annotator=user, project=project) == first


def test_each_comparison_gets_exactly_overlap_distinct_annotators():
    project, comparisons = _project(2, overlap=2)
    users = _annotators(project, 5)
    for user in users:
        while (
            assignment := labelling.assignment_claim(annotator=user, project=project)
        ) is not None:
            labelling.judgement_submit(
                annotator=user, assignment_id=assignment.pk, verdict=Verdict("left")
            )
    for comparison in comparisons:
        judges = list(comparison.judgements.values_list("annotator", flat=True))
        assert len(judges) == 2 and len(set(judges)) == 2
    assert Judgement.objects.count() == 4


def test_never_the_same_comparison_twice_to_one_annotator():
    project, _ = _project(2, overlap=3)
    (user,) = _annotators(project, 1)
    seen = [_label(user, project).comparison_id for _ in range(2)]
    assert len(set(seen)) == 2
    assert labelling.assignment_claim(annotator=user, project=project) is None


def test_left_side_alternates_between_annotators_and_maps_back_to_a_b():
    """The same screen pick 'left' means a for one annotator and b for the next."""
    project, (comparison,) = _project(1, overlap=2)
    first, second = _annotators(project, 2)
    a1 = _label(first, project, "left")
    a2 = _label(second, project, "left")
    assert {a1.shown_left, a2.shown_left} == {"a", "b"}
    for assignment, user in ((a1, first), (a2, second)):
        judgement = Judgement.objects.get(comparison=comparison, annotator=user)
        assert judgement.choice == assignment.shown_left
        assert judgement.shown_left == assignment.shown_left


def test_right_and_strength_and_tie():
    project, _ = _project(2, overlap=1)
    (user,) = _annotators(project, 1)
    right = _label(user, project, "right", 3)
    tie = _label(user, project, "tie", 3)
    j_right = Judgement.objects.get(comparison=right.comparison)
    assert j_right.choice == ("b" if right.shown_left == "a" else "a") and j_right.strength == 3
    j_tie = Judgement.objects.get(comparison=tie.comparison)
    assert (j_tie.choice, j_tie.strength) == ("tie", 1)


def test_double_submission_is_idempotent():
    project, _ = _project(1, overlap=1)
    (user,) = _annotators(project, 1)
    assignment = labelling.assignment_claim(annotator=user, project=project)
    for pick in ("left", "right"):
        labelling.judgement_submit(
            annotator=user, assignment_id=assignment.pk, verdict=Verdict(pick)
        )
    judgement = Judgement.objects.get()
    assert judgement.choice == assignment.shown_left  # the first submission stands


def test_submission_of_a_pair_imported_meanwhile_keeps_the_imported_judgement():
    """The annotator's judgement of the pair arrived by import while the pair was on screen: the
    submission completes the assignment and returns that judgement; no second row, no error."""
    from tests.factories import JudgementFactory

    project, _ = _project(1, overlap=2)
    (user,) = _annotators(project, 1)
    assignment = labelling.assignment_claim(annotator=user, project=project)
    imported = JudgementFactory(comparison=assignment.comparison, annotator=user, choice="tie")
    stored = labelling.judgement_submit(
        annotator=user, assignment_id=assignment.pk, verdict=Verdict("left")
    )
    assert stored == imported and Judgement.objects.count() == 1
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.DONE


def test_submission_reads_the_assignments_own_project_whatever_the_caller_passes():
    """The view passes the project of the URL; an assignment of another project is validated
    against its own project's rules (here: no ties), never the one passed in."""
    strict, _ = _project(1, allow_ties=False)
    lenient, _ = _project(1, allow_ties=True)
    (user,) = _annotators(strict, 1)
    lenient.members.add(user)
    assignment = labelling.assignment_claim(annotator=user, project=strict)
    with pytest.raises(LabellingError, match="does not allow ties"):
        labelling.judgement_submit(
            annotator=user, assignment_id=assignment.pk, verdict=Verdict("tie"), project=lenient
        )
    stored = labelling.judgement_submit(
        annotator=user, assignment_id=assignment.pk, verdict=Verdict("left"), project=strict
    )
    assert stored.pk and stored.comparison_id == assignment.comparison_id
    assert (stored.created_at, stored.updated_at) == (
        Judgement.objects.values_list("created_at", "updated_at").get()
    )


@pytest.mark.parametrize(
    ("fields", "verdict", "message"),
    [
        ({}, Verdict("up"), "unknown pick 'up'"),
        ({"allow_ties": False}, Verdict("tie"), "does not allow ties"),
        ({"allow_both_bad": False}, Verdict("both_bad"), "does not allow 'both bad'"),
        ({}, Verdict("left", 4), "strength must be between 1 and 3"),
        ({"strength_scale": 1}, Verdict("left", 2), "strength must be between 1 and 1"),
    ],
)
def test_invalid_verdicts_are_refused_and_change_nothing(fields, verdict, message):
    project, _ = _project(1, overlap=1, **fields)
    (user,) = _annotators(project, 1)
    assignment = labelling.assignment_claim(annotator=user, project=project)
    with pytest.raises(LabellingError, match=message):
        labelling.judgement_submit(annotator=user, assignment_id=assignment.pk, verdict=verdict)
    assert not Judgement.objects.exists()
    assert Assignment.objects.get().status == Assignment.Status.ACTIVE


def test_someone_elses_assignment_cannot_be_submitted():
    project, _ = _project(1, overlap=2)
    owner, intruder = _annotators(project, 2)
    assignment = labelling.assignment_claim(annotator=owner, project=project)
    with pytest.raises(LabellingError, match="no longer assigned to you"):
        labelling.judgement_submit(
            annotator=intruder, assignment_id=assignment.pk, verdict=Verdict("left")
        )


def test_expired_lease_returns_the_slot_to_the_pool():
    project, (comparison,) = _project(1, overlap=1)
    slow, fast = _annotators(project, 2)
    lease = labelling.assignment_claim(annotator=slow, project=project)
    assert labelling.assignment_claim(annotator=fast, project=project) is None
    Assignment.objects.filter(pk=lease.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    taken_over = labelling.assignment_claim(annotator=fast, project=project)
    assert taken_over is not None and taken_over.comparison == comparison
    assert not Assignment.objects.filter(pk=lease.pk).exists()
    with pytest.raises(LabellingError, match="no longer assigned"):
        labelling.judgement_submit(annotator=slow, assignment_id=lease.pk, verdict=Verdict("left"))


def test_expired_leases_are_released_every_few_seconds_while_free_pairs_remain(monkeypatch):
    """While free pairs remain, claims look for expired leases once per RELEASE_EVERY_S seconds:
    inside the window the expired lease stays; the first claim after it releases the slot."""
    from django.core.cache import cache

    project, (first, second) = _project(2, overlap=1)
    slow, fast, late = _annotators(project, 3)
    lease = labelling.assignment_claim(annotator=slow, project=project)
    assert lease.comparison == first
    Assignment.objects.filter(pk=lease.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert labelling.assignment_claim(annotator=fast, project=project).comparison == second
    assert Assignment.objects.filter(pk=lease.pk).exists()  # inside the window: not looked for
    # The window has passed: for the shared cache and for this process's own note of it.
    cache.delete(f"concord:lease-release:{project.pk}")
    monkeypatch.setattr(labelling, "_release_asked", {})
    assert labelling.assignment_claim(annotator=late, project=project).comparison == first
    assert not Assignment.objects.filter(pk=lease.pk).exists()


def test_late_submission_of_an_unreclaimed_expired_lease_is_kept():
    """Nothing an annotator submitted is lost: an expired lease nobody took is still accepted."""
    project, _ = _project(1, overlap=1)
    (user,) = _annotators(project, 1)
    lease = labelling.assignment_claim(annotator=user, project=project)
    Assignment.objects.filter(pk=lease.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    labelling.judgement_submit(annotator=user, assignment_id=lease.pk, verdict=Verdict("tie"))
    assert Judgement.objects.get().choice == "tie"


def test_skip_frees_the_slot_and_never_returns_to_that_annotator():
    project, (_first, _second) = _project(2, overlap=1)
    skipper, other = _annotators(project, 2)
    lease = labelling.assignment_claim(annotator=skipper, project=project)
    labelling.assignment_skip(annotator=skipper, assignment_id=lease.pk)
    following = labelling.assignment_claim(annotator=skipper, project=project)
    assert following.comparison != lease.comparison
    assert (
        labelling.assignment_claim(annotator=other, project=project).comparison == lease.comparison
    )


def test_edit_last_judgement_keeps_the_shown_side():
    project, _ = _project(2, overlap=1)
    (user,) = _annotators(project, 1)
    _label(user, project, "left", 3)
    assignment = _label(user, project, "left", 1)
    last = judgement_last(annotator=user, project=project)
    assert last.comparison_id == assignment.comparison_id
    edited = labelling.judgement_edit(
        annotator=user, judgement_id=last.pk, verdict=Verdict("right", 2), rationale="misread"
    )
    expected = "b" if assignment.shown_left == "a" else "a"
    assert (edited.choice, edited.strength, edited.rationale) == (expected, 2, "misread")
    assert Judgement.objects.count() == 2


def test_edit_refuses_another_annotators_judgement():
    project, _ = _project(1, overlap=2)
    owner, other = _annotators(project, 2)
    _label(owner, project)
    judgement = Judgement.objects.get()
    with pytest.raises(LabellingError, match="no such judgement of yours"):
        labelling.judgement_edit(annotator=other, judgement_id=judgement.pk, verdict=Verdict("tie"))


def test_gold_items_are_mixed_in_for_everyone_outside_the_overlap():
    project, comparisons = _project(6, overlap=1)
    project.gold_every = 3
    project.save()
    gold = comparisons[-1]
    gold.gold = "a"
    gold.save()
    first, second = _annotators(project, 2)
    kinds = [_label(first, project).kind for _ in range(4)]
    assert kinds == ["normal", "normal", "gold", "normal"]
    assert [_label(second, project).kind for _ in range(3)][2] == "gold"
    assert gold.judgements.count() == 2  # both annotators judged the gold item


def test_swap_repeat_shows_an_old_pair_with_sides_flipped():
    project, _ = _project(10, overlap=1)
    project.repeat_every = 8
    project.save()
    (user,) = _annotators(project, 1)
    normal = [_label(user, project) for _ in range(7)]
    repeat = _label(user, project, "left")
    assert repeat.kind == "repeat"
    original = next(a for a in normal if a.comparison_id == repeat.comparison_id)
    assert repeat.shown_left != original.shown_left
    stored = RepeatJudgement.objects.get()
    assert (stored.comparison_id, stored.choice) == (original.comparison_id, repeat.shown_left)
    assert Judgement.objects.count() == 7


def test_progress_counts_open_pairs_the_annotator_has_not_touched():
    """Pairs left = open pairs (below the overlap) minus those the annotator was given (judged,
    skipped, on screen) or has an imported judgement on; full pairs do not count either way."""
    from annotation.selectors.labelling import labelling_progress
    from tests.factories import JudgementFactory

    project, comparisons = _project(5, overlap=2)
    a, b = _annotators(project, 2)
    _label(a, project)  # a judges c0
    skipped = labelling.assignment_claim(annotator=a, project=project)  # c1
    _label(b, project)  # b judges c0: c0 is full
    labelling.assignment_skip(annotator=a, assignment_id=skipped.pk)
    JudgementFactory(comparison=comparisons[2], annotator=a)  # imported: no assignment
    progress_a = labelling_progress(annotator=a, project=project)
    assert (progress_a.done, progress_a.available) == (2, 2)  # open c1-c4; a touched c1, c2
    on_screen = labelling.assignment_claim(annotator=b, project=project)
    assert on_screen.comparison_id == comparisons[1].pk
    progress_b = labelling_progress(annotator=b, project=project)
    # c2-c4 untouched by b, plus c1 that b holds: the pair on screen counts as left wherever the
    # count is shown (the labelling screen or the edit screen)
    assert (progress_b.done, progress_b.available) == (1, 4)


def test_a_stale_open_pair_count_is_recounted_by_one_request_while_the_others_keep_it():
    """The shared count of open pairs is served stale while another request holds the recount
    lock (no herd of scans as it expires); once the lock is free the next request recounts."""
    from django.core.cache import cache

    from annotation.selectors.labelling import labelling_progress

    project, _ = _project(5, overlap=1)
    a, b = _annotators(project, 2)
    assert labelling_progress(annotator=a, project=project).available == 5
    _label(b, project)  # b fills c0: a's fresh count does not see another annotator's claim
    assert labelling_progress(annotator=a, project=project).available == 5
    key = f"concord:open-pairs:{project.pk}:{project.created_at.timestamp()}"
    open_count, counted_at, fresh_s = cache.get(key)
    stale_at = counted_at - timedelta(seconds=fresh_s + 1)
    cache.set(key, (open_count, stale_at, fresh_s), 60)
    assert cache.add(f"{key}:recount", "1", 60)  # another request is recounting
    assert labelling_progress(annotator=a, project=project).available == 5
    cache.delete(f"{key}:recount")
    assert labelling_progress(annotator=a, project=project).available == 4
    assert cache.get(key)[1] > stale_at  # the recount was stored, and its lock released
    assert cache.get(f"{key}:recount") is None


# Threads need committed rows: transactional tests. serialized_rollback restores the migrated role
# groups, so a later test with serialized_rollback (the browser tests) does not meet groups that
# the flush's post_migrate re-created under new ids (a unique-name clash on its restore).
CONCURRENT_DB = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@CONCURRENT_DB
def test_concurrent_claims_never_over_assign():
    """24 annotator threads claim and submit at once: every comparison ends with exactly `overlap`
    distinct annotators, none beyond, none lost."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks with SKIP LOCKED need PostgreSQL (make test uses it)")
    project, _comparisons = _project(20, overlap=3)
    users = _annotators(project, 24)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(users))

    def work(user) -> None:
        try:
            barrier.wait()
            while (a := labelling.assignment_claim(annotator=user, project=project)) is not None:
                labelling.judgement_submit(
                    annotator=user, assignment_id=a.pk, verdict=Verdict("left")
                )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for comparison in Comparison.objects.filter(project=project):
        judges = list(comparison.judgements.values_list("annotator", flat=True))
        assert len(judges) == 3 == len(set(judges)), comparison.pk
        assert comparison.taken == 3
    assert Judgement.objects.count() == 60


@CONCURRENT_DB
@pytest.mark.parametrize(("overlap", "claimed"), [(2, True), (1, False)])
def test_a_claim_finding_the_free_pair_locked_looks_again_after_a_pause(
    monkeypatch, overlap, claimed
):
    """One pair. Another annotator's claim holds its row lock (its transaction open), so the
    claim finds nothing unlocked, pauses while the other commits (the patched sleep lets it) and
    looks again: with overlap 2 it takes the pair's second slot; with overlap 1 the pair is full
    and it says None after that one pause."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks with SKIP LOCKED need PostgreSQL (make test uses it)")
    project, (comparison,) = _project(1, overlap=overlap)
    first, second = _annotators(project, 2)
    got, pauses = claim_while_held(
        monkeypatch,
        "annotation.work_queue.claims.time.sleep",
        hold=lambda: labelling.assignment_claim(annotator=first, project=project),
        claim=lambda: labelling.assignment_claim(annotator=second, project=project),
    )
    assert (got is not None) is claimed and len(pauses) == 1
    assert Comparison.objects.get(pk=comparison.pk).taken == (2 if claimed else 1)


@CONCURRENT_DB
@pytest.mark.parametrize("submitters", [20, 95])
def test_concurrent_double_submission_stores_one_row(submitters):
    """Many simultaneous submissions of one assignment, each thread on its own database connection,
    create exactly one judgement, and every caller gets that judgement back (no error).

    The large case has 95 threads, not 100: PostgreSQL's max_connections is 100 here, and 100
    connections held at once (each thread waits on the assignment's row lock) would leave no slot for
    the test runner or any other client of the server. Every thread connects before the barrier, so
    all the submissions reach the row lock together.
    """
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    project, _ = _project(1, overlap=1)
    (user,) = _annotators(project, 1)
    assignment = labelling.assignment_claim(annotator=user, project=project)
    connection.close()  # the main thread's slot is free while the threads hold theirs
    barrier = threading.Barrier(submitters)
    answers: list[int] = []
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=30)
            stored = labelling.judgement_submit(
                annotator=user, assignment_id=assignment.pk, verdict=Verdict("left")
            )
            answers.append(stored.pk)
        except BaseException as exc:
            barrier.abort()  # one failure releases the others instead of hanging them
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(submitters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors[:3]
    (judgement,) = Judgement.objects.all()
    assert answers == [judgement.pk] * submitters
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.DONE
    assert Comparison.objects.get().taken == 1


def test_claims_follow_the_cluster_balanced_queue():
    """After clustering, queue positions come from balanced batches: the first batch mixes clusters
    although the import put all of cluster 0 first; a later import joins the end of the queue."""
    from annotation.services.active_queue import queue_rebalance

    project, comparisons = _project(40, overlap=1)
    for index, comparison in enumerate(comparisons):
        comparison.prompt.cluster = 0 if index < 30 else 1
        comparison.prompt.save()
    assert queue_rebalance(project=project) == 40
    (user,) = _annotators(project, 1)
    first_batch = [_label(user, project).comparison.prompt.cluster for _ in range(20)]
    assert set(first_batch) == {0, 1}
    from annotation.services.importing import comparisons_import

    comparisons_import(
        project=project, lines=['{"prompt": "new", "response_a": "x", "response_b": "y"}']
    )
    newest = Comparison.objects.get(prompt__text="new")
    assert newest.queue_position > max(
        c.queue_position for c in Comparison.objects.exclude(pk=newest.pk)
    )

"""Migration 0012 gives eval assignments the work queue's lease states: those already answered
become done (finished when judged), the others stay active, so they expire as before."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from monitoring.models import EvalAssignment, EvalJudgement
from monitoring.services import eval_rounds as eval_services

pytestmark = pytest.mark.django_db

BEFORE = [("monitoring", "0011_judge_eval_round_job_lifecycle")]
AFTER = [("monitoring", "0012_eval_assignment_queue_states")]


def _migrate(target) -> None:
    if connection.vendor == "postgresql":  # pending deferred checks block ALTER TABLE
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


def test_answered_assignments_become_done_and_the_rest_stay_active(open_round, reviewers):
    """rev0 rates an item, rev1 holds one unanswered; after going back to 0011 (no states) and
    forward again: rev0's is done, finished when judged; rev1's is active, unfinished."""
    rated = eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round)
    eval_services.eval_submit(assignment=rated, reviewer=reviewers[0], pick="tie", usefulness=3)
    held = eval_services.eval_claim_next(reviewer=reviewers[1], round_=open_round)
    _migrate(BEFORE)
    _migrate(AFTER)
    done, active = EvalAssignment.objects.get(pk=rated.pk), EvalAssignment.objects.get(pk=held.pk)
    assert (done.status, done.kind) == ("done", "normal")
    assert done.finished_at == EvalJudgement.objects.get(assignment=done).created_at
    assert (active.status, active.finished_at) == ("active", None)

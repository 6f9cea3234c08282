"""The one job lifecycle (common.lifecycle) on every job kind: imports, exports, clustering runs, judges,
eval rounds' generation and judges, training runs.

A redelivered task that finds its job running (another worker claimed it) or finished does nothing;
the one reaper fails every kind's stale running job with a message and leaves fresh ones; every job
page shows the same state words from the one partial."""

from __future__ import annotations

import itertools
import json
import threading
import time
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from annotation.models import ClusteringRun, Comparison, ExportJob, ImportJob
from annotation.services.import_jobs import import_job_create
from annotation.tasks import cluster_prompts, export_job_run_task, import_job_run_task
from common import lifecycle
from common.jobs import job_kinds
from common.lifecycle import JobHeartbeat, JobStateError
from common.tasks import jobs_reap_stale
from monitoring.models import EvalRound, Judge, JudgeOutput
from monitoring.tasks import generate_round_responses, judge_round, judge_run
from tests.factories import ProjectFactory, UserFactory, snapshot_of_pairs
from tests.helpers.clients import logged_in
from training.models import Checkpoint, RunEvent, TrainingRun
from training.tasks import run_training_task

pytestmark = pytest.mark.django_db
OTHER = "other-host:4242"  # the worker that took the job first


@pytest.fixture
def snapshot(settings, tmp_path):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.UPLOAD_DIR = tmp_path / "uploads"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.CONCORD_GPU_QUEUE = "gpu"
    settings.CELERY_TASK_DEFAULT_QUEUE = "default"
    return snapshot_of_pairs(slug="lifecycle")


def _run(snapshot, status: str = "queued") -> TrainingRun:
    return TrainingRun.objects.create(
        name=f"{status} run", kind="dpo", base_model="smollm2-135m-instruct",
        snapshot=snapshot, status=status,
    )  # fmt: skip


def _import(project, status: str = "queued") -> ImportJob:
    return ImportJob.objects.create(
        project=project, path="/nowhere", original_name="rows.jsonl", size_bytes=10, status=status
    )


_judge_numbers = itertools.count(1)


def _judge(project, status: str = "queued") -> Judge:
    name = f"j{next(_judge_numbers)}"
    return Judge.objects.create(
        project=project, name=name, version=1, kind="local_llm", model_name="m",
        template="{prompt}", annotator=UserFactory(username=f"judge-{name}"), status=status,
    )  # fmt: skip


def _round(snapshot, **fields) -> EvalRound:
    run = _run(snapshot, "succeeded")
    checkpoint = Checkpoint.objects.create(run=run, step=1, path="/nowhere")
    return EvalRound.objects.create(
        checkpoint=checkpoint, project=snapshot.export.project, baseline_model="base",
        prompt_ids=[], size=0, **fields,
    )  # fmt: skip


def _jobs(snapshot) -> dict[str, tuple[type, int, str]]:
    """One queued job of every kind: name -> (model, pk, status field)."""
    project = snapshot.export.project
    judged = _round(snapshot, status="open", generation_status="succeeded", judge=_judge(project))
    EvalRound.objects.filter(pk=judged.pk).update(judge_status="queued")
    generating = _round(snapshot)
    return {
        "import": (ImportJob, _import(project).pk, "status"),
        "clustering": (
            ClusteringRun,
            # One active clustering run per project: each call clusters a project of its own.
            ClusteringRun.objects.create(project=ProjectFactory(), model_name="m").pk,
            "status",
        ),
        "export": (ExportJob, ExportJob.objects.create(project=project).pk, "status"),
        "judge": (Judge, _judge(project).pk, "status"),
        "round judge": (EvalRound, judged.pk, "judge_status"),
        "round generation": (EvalRound, generating.pk, "generation_status"),
        "training run": (TrainingRun, _run(snapshot).pk, "status"),
    }


# What each kind's Celery task is called with (the job's id); each returns the job's status.
TASKS = {
    "import": import_job_run_task,
    "clustering": cluster_prompts,
    "export": export_job_run_task,
    "judge": judge_run,
    "round judge": judge_round,
    "round generation": generate_round_responses,
    "training run": run_training_task,
}


def _row(model, pk: int, field: str) -> dict:
    kind = lifecycle.job_kind_of(model, field)
    return model.objects.filter(pk=pk).values(field, kind.worker_field, kind.started_field).get()


@pytest.mark.parametrize("name", list(TASKS))
def test_a_redelivered_task_finds_its_job_taken_or_finished_and_does_nothing(snapshot, name):
    """The first delivery claimed the job on another worker: the second delivery of the same
    message finds it running and changes nothing (same worker, same start, no work done). Once the
    job has finished, a third delivery finds it finished and again changes nothing."""
    model, pk, field = _jobs(snapshot)[name]
    assert lifecycle.job_claim(model=model, pk=pk, worker=OTHER, status_field=field)
    taken = _row(model, pk, field)
    assert taken[field] == "running"
    TASKS[name](pk)
    assert _row(model, pk, field) == taken
    assert lifecycle.job_finish(model=model, pk=pk, state="succeeded", status_field=field)
    finished = _row(model, pk, field)
    TASKS[name](pk)
    assert _row(model, pk, field) == finished and finished[field] == "succeeded"
    assert not JudgeOutput.objects.exists() and not RunEvent.objects.filter(action="started")


def test_an_import_delivered_twice_imports_once(snapshot):
    """A real upload, its task called twice (a redelivered message after the first finished): the
    comparisons are imported once and the job keeps the first run's result."""
    project = snapshot.export.project
    before = Comparison.objects.filter(project=project).count()
    rows = [{"prompt": f"Q{k}?", "response_a": "yes", "response_b": "no"} for k in range(3)]
    upload = SimpleUploadedFile(
        "rows.jsonl", "\n".join(json.dumps(r) for r in rows).encode(), "application/jsonl"
    )
    job = import_job_create(project=project, upload=upload, created_by=None)
    assert import_job_run_task(job.pk) == "succeeded"
    job.refresh_from_db()
    first = (job.worker, job.started_at, job.finished_at, job.result)
    assert Comparison.objects.filter(project=project).count() == before + 3
    assert import_job_run_task(job.pk) == "succeeded"
    job.refresh_from_db()
    assert (job.worker, job.started_at, job.finished_at, job.result) == first
    assert Comparison.objects.filter(project=project).count() == before + 3


def test_the_claim_is_taken_once(snapshot):
    """Two claims of one queued job: the first wins (worker, start and heartbeat set), the second
    is refused and writes nothing."""
    job = _import(snapshot.export.project)
    assert lifecycle.job_claim(model=ImportJob, pk=job.pk, worker="a:1")
    assert not lifecycle.job_claim(model=ImportJob, pk=job.pk, worker="b:2")
    job.refresh_from_db()
    assert (job.status, job.worker) == ("running", "a:1")
    assert job.started_at == job.heartbeat_at is not None


def test_the_reaper_fails_every_kinds_stale_jobs_and_leaves_fresh_ones(snapshot, settings):
    """Every kind has one running job silent for 200 s and one that beat 10 s ago; the stale
    limit is 180 s. One reaper pass (the beat task) fails the seven stale ones with a message saying
    when each was last heard of, and leaves the seven fresh ones and the queued ones running or
    queued. The kinds' own consequences follow: the import's error is a row of its errors list,
    the generation's round fails with its waiting judge, the training run gets a "reaped" event."""
    settings.CONCORD_HEARTBEAT_STALE_S = 180
    now = timezone.now()
    stale, fresh = _jobs(snapshot), _jobs(snapshot)
    queued = _jobs(snapshot)
    for jobs, age in ((stale, 200), (fresh, 10)):
        for model, pk, field in jobs.values():
            kind = lifecycle.job_kind_of(model, field)
            model.objects.filter(pk=pk).update(
                **{field: "running", kind.heartbeat_field: now - timedelta(seconds=age)}
            )
    waiting = stale["round generation"][1]
    EvalRound.objects.filter(pk=waiting).update(judge_status="waiting")

    reaped = jobs_reap_stale()

    assert sorted(reaped) == sorted(f"{m._meta.label}.{f}#{pk}" for m, pk, f in stale.values())
    for model, pk, field in stale.values():
        kind = lifecycle.job_kind_of(model, field)
        row = model.objects.filter(pk=pk).values(field, kind.error_field, kind.finished_field).get()
        assert row[field] == "failed" and row[kind.finished_field] is not None
        error = row[kind.error_field]
        text = error[0]["message"] if model is ImportJob else error
        assert "The worker stopped answering (no heartbeat since" in text, text
    for jobs, state in ((fresh, "running"), (queued, "queued")):
        for model, pk, field in jobs.values():
            assert model.objects.filter(pk=pk).values_list(field, flat=True).get() == state
    round_ = EvalRound.objects.get(pk=waiting)
    assert (round_.status, round_.judge_status) == ("failed", "failed")
    run = TrainingRun.objects.get(pk=stale["training run"][1])
    assert run.events.filter(action="reaped").exists() and "resume to continue" in run.error
    assert jobs_reap_stale() == []  # nothing left to reap


def test_a_job_that_finished_after_the_reaper_keeps_the_failed_state(snapshot):
    """The reaper failed a job; the worker's late end changes nothing (job_finish is
    conditional), so the page never flips from failed back to succeeded."""
    job = _import(snapshot.export.project, status="running")
    assert lifecycle.jobs_reap_stale(stale_after_s=0, models=["annotation.ImportJob"])
    assert not lifecycle.job_finish(model=ImportJob, pk=job.pk, state="succeeded")
    job.refresh_from_db()
    assert job.status == "failed"


def test_cancel_a_queued_job_at_once_and_a_running_one_only_when_it_polls(snapshot):
    """A queued import is cancelled at once; a running clustering run cannot be stopped part-way
    (clear error, nothing changed); a running import or training run gets its cancel flag; a
    finished job has nothing to cancel."""
    project = snapshot.export.project
    queued, running = _import(project), _import(project, status="running")
    assert lifecycle.job_cancel(model=ImportJob, pk=queued.pk) == "cancelled"
    queued.refresh_from_db()
    assert queued.status == "cancelled" and queued.finished_at is not None
    assert lifecycle.job_cancel(model=ImportJob, pk=running.pk) == "requested"
    assert ImportJob.objects.get(pk=running.pk).cancel_requested
    clustering = ClusteringRun.objects.create(project=project, model_name="m", status="running")
    with pytest.raises(JobStateError, match=f"clustering run #{clustering.pk} is running and"):
        lifecycle.job_cancel(model=ClusteringRun, pk=clustering.pk)
    assert ClusteringRun.objects.get(pk=clustering.pk).status == "running"
    run = _run(snapshot, "running")
    assert lifecycle.job_cancel(model=TrainingRun, pk=run.pk) == "requested"
    assert TrainingRun.objects.get(pk=run.pk).cancel_requested
    with pytest.raises(JobStateError, match="is cancelled; there is nothing to cancel"):
        lifecycle.job_cancel(model=ImportJob, pk=queued.pk)


def test_finish_refuses_a_state_that_is_no_end(snapshot):
    job = _import(snapshot.export.project, status="running")
    with pytest.raises(ValueError, match="a job finishes as one of succeeded, failed, cancelled"):
        lifecycle.job_finish(model=ImportJob, pk=job.pk, state="queued")
    assert ImportJob.objects.get(pk=job.pk).status == "running"


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_heartbeat_thread_beats_while_the_job_runs_and_notices_it_stopped(snapshot):
    """Every 0.05 s on its own connection: the heartbeat moves on while the job runs; once the
    job is no longer running (here: the reaper failed it) the thread sets ``cancel``."""
    job = _import(snapshot.export.project)
    lifecycle.job_claim(model=ImportJob, pk=job.pk)
    first = ImportJob.objects.get(pk=job.pk).heartbeat_at
    with JobHeartbeat(model=ImportJob, pk=job.pk, every_s=0.05) as beat:
        time.sleep(0.3)
        assert ImportJob.objects.get(pk=job.pk).heartbeat_at > first
        assert not beat.cancel.is_set()
        ImportJob.objects.filter(pk=job.pk).update(status="failed")
        assert beat.cancel.wait(2.0)
    assert not beat.is_alive() and threading.active_count() >= 1


def test_every_kind_names_the_lifecycle_states_in_the_same_words():
    """Each job model's status choices hold the five states with the lifecycle's labels (pages
    read them through the one partial), and any other value is one of its kind's idle values."""
    from django.apps import apps

    for kind in job_kinds():
        field = apps.get_model(kind.model)._meta.get_field(kind.status_field)
        choices = dict(field.choices)
        for state, words in lifecycle.STATE_LABELS.items():
            assert choices.get(state) == words, (kind.model, kind.status_field, state)
        extra = set(choices) - set(lifecycle.STATES)
        assert extra <= set(kind.idle), (kind.model, kind.status_field, extra)


def test_every_job_page_shows_the_same_state_badge(snapshot, ml_engineer, reviewer):
    """The import list, the clusters page, the judges list and report, an eval round (its
    generation and its judge) and a run page all render the one partial: the state's words in a
    badge, and for a queued job what it waits behind."""
    project = snapshot.export.project
    run = _run(snapshot, "running")
    _import(project, status="running")
    ClusteringRun.objects.create(project=project, model_name="m", status="failed", error="boom")
    judge = _judge(project)
    round_ = _round(snapshot)
    EvalRound.objects.filter(pk=round_.pk).update(judge=judge, judge_status="succeeded")
    engineer = logged_in(ml_engineer)
    engineer.force_login(ml_engineer)
    pages = {
        f"/annotation/p/{project.slug}/manage/": ['data-state="running">Running</span>'],
        f"/annotation/p/{project.slug}/clusters/": ['data-state="failed">Failed</span>'],
        f"/monitoring/projects/{project.slug}/judges/": [
            'data-state="queued">Queued</span>',
            'data-testid="waits-behind">Queued: waiting behind training run',
        ],
        f"/monitoring/judges/{judge.pk}/": ['data-state="queued">Queued</span>'],
        f"/monitoring/runs/{run.pk}/": ['data-state="running">Running</span>'],
    }
    for url, expected in pages.items():
        html = engineer.get(url).content.decode()
        for fragment in expected:
            assert fragment in html, (url, fragment)
    html = logged_in(reviewer).get(f"/monitoring/eval/{round_.pk}/").content.decode()
    assert 'data-testid="generation-status" data-state="queued">Queued</span>' in html
    assert 'data-testid="judge-status" data-state="succeeded">Succeeded</span>' in html

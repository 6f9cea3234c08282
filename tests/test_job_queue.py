"""What a queued job waits behind (common.job_selectors): the running jobs of its own queue, then
the queued ones created before it; jobs of the other queue never."""

import pytest

from annotation.models import ClusteringRun, ImportJob
from common.job_selectors import job_queue_place, job_waiting_text
from monitoring.models import Judge
from tests.factories import ProjectFactory, UserFactory, snapshot_of_pairs
from tests.helpers.clients import logged_in
from training.models import TrainingRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def snapshot(settings, tmp_path):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_GPU_QUEUE = "gpu"
    settings.CELERY_TASK_DEFAULT_QUEUE = "default"
    return snapshot_of_pairs(slug="queues")


def _run(snapshot, status: str) -> TrainingRun:
    return TrainingRun.objects.create(
        name=f"{status} run",
        kind="dpo",
        base_model="smollm2-135m-instruct",
        snapshot=snapshot,
        status=status,
    )


def _import(project, status: str = "queued") -> ImportJob:
    return ImportJob.objects.create(
        project=project, path="/nowhere", original_name="rows.jsonl", size_bytes=10, status=status
    )


def _judge(project, name: str, kind: str, status: str = "queued") -> Judge:
    endpoint = "http://127.0.0.1:9/v1" if kind == "openai" else ""
    return Judge.objects.create(
        project=project, name=name, version=1, kind=kind, model_name="m", template="{prompt}",
        endpoint_url=endpoint, annotator=UserFactory(username=f"judge-{name}"), status=status,
    )  # fmt: skip


def test_a_queued_run_waits_behind_the_running_one_and_older_queued_ones(snapshot):
    """The gpu worker takes one task at a time, in order: the second queued run waits behind the
    running run and the first queued run; the first only behind the running one."""
    running = _run(snapshot, "running")
    first = _run(snapshot, "queued")
    second = _run(snapshot, "queued")
    assert job_waiting_text(job=first) == (
        f"Queued: waiting behind training run #{running.pk} (running) on the gpu queue."
    )
    assert job_waiting_text(job=second) == (
        f"Queued: waiting behind training run #{running.pk} (running) and training run "
        f"#{first.pk} (queued) on the gpu queue."
    )


def test_an_import_waits_only_behind_default_queue_jobs(snapshot):
    """A training run (gpu queue) and a local-model judge (gpu) are not ahead of an import; the
    running clustering run and an endpoint judge queued earlier (default queue) are."""
    project = snapshot.export.project
    _run(snapshot, "running")
    _judge(project, "local", "local_llm", status="running")
    clustering = ClusteringRun.objects.create(project=project, status="running", model_name="m")
    endpoint_judge = _judge(project, "remote", "openai")
    job = _import(project)
    assert job_waiting_text(job=job) == (
        f"Queued: waiting behind clustering run #{clustering.pk} (running) and judge "
        f"#{endpoint_judge.pk} (queued) on the default queue."
    )


def test_an_import_in_progress_is_listed_as_running(snapshot):
    """An import being validated or written is running, in the lifecycle's words."""
    project = snapshot.export.project
    importing = _import(project, status="running")
    job = _import(project)
    assert job_waiting_text(job=job) == (
        f"Queued: waiting behind import #{importing.pk} (running) on the default queue."
    )


def test_a_local_judge_waits_behind_training(snapshot):
    running = _run(snapshot, "running")
    judge = _judge(snapshot.export.project, "local", "local_llm")
    assert job_waiting_text(job=judge) == (
        f"Queued: waiting behind training run #{running.pk} (running) on the gpu queue."
    )


def test_nothing_ahead_says_so(db, settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = "default"
    job = _import(ProjectFactory())
    assert job_waiting_text(job=job) == (
        "Queued: nothing is ahead of it on the default queue; it starts when a default worker "
        "takes it."
    )


def test_a_long_queue_names_three_jobs_and_counts_the_rest(snapshot):
    runs = [_run(snapshot, "queued") for _ in range(5)]
    last = _run(snapshot, "queued")
    assert job_waiting_text(job=last) == (
        f"Queued: waiting behind training run #{runs[0].pk} (queued), training run #{runs[1].pk} "
        f"(queued), training run #{runs[2].pk} (queued) and 2 more jobs on the gpu queue."
    )
    assert len(job_queue_place(job=last).ahead) == 5


@pytest.mark.parametrize("status", ["draft", "running", "succeeded"])
def test_a_job_that_is_not_queued_has_no_line(snapshot, status):
    assert job_waiting_text(job=_run(snapshot, status)) == ""


def test_the_clustering_and_judges_pages_show_the_line(snapshot, ml_engineer):
    """A queued clustering run's page names the import being written ahead of it (default
    queue); the judges list names the training run ahead of a queued local-model judge (gpu)."""
    project = snapshot.export.project
    importing = _import(project, status="running")
    ClusteringRun.objects.create(project=project, status="queued", model_name="m")
    running = _run(snapshot, "running")
    _judge(project, "local", "local_llm")
    client = logged_in(ml_engineer)
    clusters = client.get(f"/annotation/p/{project.slug}/clusters/").content.decode()
    assert (
        f"Queued: waiting behind import #{importing.pk} (running) on the default queue." in clusters
    )
    judges = client.get(f"/monitoring/projects/{project.slug}/judges/").content.decode()
    assert (
        f"Queued: waiting behind training run #{running.pk} (running) on the gpu queue." in judges
    )

"""The training admin writes through the services: deleting a run or a snapshot, and a snapshot's
creation and renaming. What the services refuse (a queued or running run, a reward model in use,
a snapshot runs train on) the admin does not offer, and a refusal deletes nothing."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import
from tests.factories import snapshot_of_pairs, training_run
from tests.helpers.clients import logged_in
from training import services
from training.models import DatasetSnapshot, TrainingRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def snapshot(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    return snapshot_of_pairs(slug="admin-writes")


def _with_status(run: TrainingRun, status: str) -> TrainingRun:
    TrainingRun.objects.filter(pk=run.pk).update(status=status)
    run.refresh_from_db()
    return run


def test_the_admin_deletes_a_draft_run_through_the_service(snapshot, ml_engineer):
    """The confirmation page, then the POST: the run and its events are gone."""
    run = training_run(snapshot=snapshot)
    client = logged_in(ml_engineer)
    url = reverse("admin:training_trainingrun_delete", args=[run.pk])
    assert client.get(url).status_code == 200
    response = client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not TrainingRun.objects.filter(pk=run.pk).exists()


@pytest.mark.parametrize("status", ["queued", "running"])
def test_an_active_run_is_not_deleted(snapshot, ml_engineer, status):
    """Queued or running: the admin's delete page and the bulk delete are refused (403), and the
    service says to cancel first; the run stays."""
    run = _with_status(training_run(snapshot=snapshot), status)
    client = logged_in(ml_engineer)
    assert (
        client.get(reverse("admin:training_trainingrun_delete", args=[run.pk])).status_code == 403
    )
    response = client.post(
        reverse("admin:training_trainingrun_changelist"),
        {"action": "delete_selected", "_selected_action": [run.pk], "post": "yes"},
    )
    assert response.status_code == 403  # the confirmation names a run it may not delete
    with pytest.raises(services.RunError, match=f"is {status}; cancel it before deleting it"):
        services.run_delete(run=run, user=ml_engineer)
    assert TrainingRun.objects.filter(pk=run.pk).exists()


def test_a_reward_model_in_use_is_not_deleted(snapshot, ml_engineer, tmp_path):
    """A succeeded reward model a PPO run scores with: refused, naming the run."""
    rm = _with_status(training_run(snapshot=snapshot, kind="rm", name="rm"), "succeeded")
    ppo = training_run(snapshot=snapshot, kind="ppo", name="ppo", reward_model_run=rm)
    with pytest.raises(services.RunError, match=rf"reward model of runs #{ppo.pk}; delete them"):
        services.run_delete(run=rm, user=ml_engineer)
    assert TrainingRun.objects.filter(pk=rm.pk).exists()
    services.run_delete(run=ppo, user=ml_engineer)
    services.run_delete(run=rm, user=ml_engineer)
    assert not TrainingRun.objects.exists()


def test_snapshots_are_created_renamed_and_deleted_through_the_services(
    snapshot, ml_engineer, monkeypatch
):
    """Adding a snapshot of a new export calls ``snapshot_for``; a change renames it (the export
    stays read-only); a snapshot with runs offers no delete and the service refuses it; one
    without runs is deleted."""
    calls: list[str] = []
    for name in ("snapshot_for", "snapshot_rename", "snapshot_delete"):
        original = getattr(services, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(services, name, counted)
    client = logged_in(ml_engineer)
    project = snapshot.export.project
    row = {"prompt": "One more?", "response_a": "Yes.", "response_b": "No.",
           "judgements": [{"annotator": "u1", "choice": "a", "strength": 2}]}  # fmt: skip
    comparisons_import(project=project, lines=[json.dumps(row)])
    export = dataset_export(project=project)  # a second export: the project has a new pair
    assert export != snapshot.export
    response = client.post(
        reverse("admin:training_datasetsnapshot_add"), {"export": export.pk, "name": "second"}
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    second = DatasetSnapshot.objects.get(export=export)
    change = reverse("admin:training_datasetsnapshot_change", args=[second.pk])
    assert client.post(change, {"name": "renamed"}).status_code == 302
    second.refresh_from_db()
    assert (second.name, second.export_id) == ("renamed", export.pk)

    training_run(snapshot=snapshot)
    delete = reverse("admin:training_datasetsnapshot_delete", args=[snapshot.pk])
    assert client.get(delete).status_code == 403
    with pytest.raises(services.RunError, match=r"is the data of runs #\d+; delete them first"):
        services.snapshot_delete(snapshot=snapshot)
    delete = reverse("admin:training_datasetsnapshot_delete", args=[second.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not DatasetSnapshot.objects.filter(pk=second.pk).exists()
    assert DatasetSnapshot.objects.filter(pk=snapshot.pk).exists()
    assert calls == ["snapshot_for", "snapshot_rename", "snapshot_delete", "snapshot_delete"]

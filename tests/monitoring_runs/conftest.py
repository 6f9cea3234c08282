"""Runs of each kind with metrics, checkpoints and samples, written straight to the database (no
training): what the run pages read."""

from __future__ import annotations

import pytest

from tests.factories import snapshot_of_pairs
from training import services
from training.models import DatasetSnapshot, TrainingRun


@pytest.fixture
def snapshot(db, tmp_path, settings) -> DatasetSnapshot:
    settings.EXPORT_DIR = tmp_path / "exports"
    return snapshot_of_pairs(slug="runs-pages", judged=False)


@pytest.fixture
def make_run(snapshot):
    """make_run(kind="dpo", status="running", config={...}, metrics={step: {name: value}})."""

    def make(*, kind="dpo", status="running", name=None, config=None, metrics=None, **fields):
        run = TrainingRun.objects.create(
            name=name or f"{kind} run", kind=kind, base_model="smollm2-135m-instruct",
            snapshot=snapshot, status=status, config=config or {}, **fields,
        )  # fmt: skip
        for step, values in (metrics or {}).items():
            services.metrics_record(run_id=run.pk, step=step, metrics=values)
        return run

    return make

"""The training app's tables in a project archive (see ``common.archive``): the snapshots of the
project's exports and the runs trained on them, with their checkpoints (paths only: weights are not
archived), metric points, samples and events. Registered from ``TrainingConfig.ready``."""

from django.db.models import QuerySet

from common.archive import ArchivePart, Table
from training import models as m


def _of(model: type, path: str):
    def rows(project: object) -> QuerySet:
        return model.objects.filter(**{path: project})

    return rows


TRAINING_PART = ArchivePart(
    name="training",
    order=20,
    tables=(
        Table("training.DatasetSnapshot", _of(m.DatasetSnapshot, "export__project")),
        Table("training.TrainingRun", _of(m.TrainingRun, "snapshot__export__project")),
        Table("training.Checkpoint", _of(m.Checkpoint, "run__snapshot__export__project")),
        Table("training.MetricPoint", _of(m.MetricPoint, "run__snapshot__export__project")),
        Table("training.RunSample", _of(m.RunSample, "run__snapshot__export__project")),
        Table("training.RunEvent", _of(m.RunEvent, "run__snapshot__export__project")),
    ),
)

"""The monitoring app's tables in a project archive (see ``common.archive``): the project's judges
and their verdicts, alerts and stopping decisions of its runs, eval rounds with items, assignments,
ratings (repeats too) and judge verdicts. Registered from ``MonitoringConfig.ready``."""

from django.db.models import QuerySet

from common.archive import ArchivePart, Table
from monitoring import models as m

RUN = "run__snapshot__export__project"


def _of(model: type, path: str):
    def rows(project: object) -> QuerySet:
        return model.objects.filter(**{path: project})

    return rows


MONITORING_PART = ArchivePart(
    name="monitoring",
    order=30,
    tables=(
        Table("monitoring.Judge", _of(m.Judge, "project")),
        Table("monitoring.JudgeOutput", _of(m.JudgeOutput, "judge__project")),
        Table("monitoring.Alert", _of(m.Alert, RUN)),
        Table(
            "monitoring.EvalRound",
            _of(m.EvalRound, "project"),
            id_lists={"prompt_ids": "annotation.Prompt"},
        ),
        Table("monitoring.EvalItem", _of(m.EvalItem, "round__project")),
        Table("monitoring.EvalAssignment", _of(m.EvalAssignment, "item__round__project")),
        Table("monitoring.EvalJudgement", _of(m.EvalJudgement, "assignment__item__round__project")),
        Table(
            "monitoring.EvalRepeatJudgement",
            _of(m.EvalRepeatJudgement, "assignment__item__round__project"),
        ),
        Table("monitoring.EvalJudgeVerdict", _of(m.EvalJudgeVerdict, "item__round__project")),
        Table("monitoring.StopDecision", _of(m.StopDecision, RUN)),
    ),
)

"""The annotation app's tables in a project archive (see ``common.archive``), in insertion order.

Left out on purpose: import jobs (they name uploaded files of the old instance) and prompt
embeddings (a cache that clustering recomputes). Registered from ``AnnotationConfig.ready``.
"""

from typing import Any

from django.db.models import QuerySet

from annotation import models as m
from common.archive import ArchivePart, Table


def _rename(row: dict[str, Any], options: dict[str, Any]) -> None:
    """The restored project takes the slug it is restored under."""
    row["slug"] = options["slug"]


def _of(model: type, path: str):
    def rows(project: m.Project) -> QuerySet:
        return model.objects.filter(**{path: project})

    return rows


ANNOTATION_PART = ArchivePart(
    name="annotation",
    order=10,
    tables=(
        Table("annotation.Project", lambda p: m.Project.objects.filter(pk=p.pk), prepare=_rename),
        Table("annotation.ProjectMembership", _of(m.ProjectMembership, "project")),
        Table("annotation.ProjectEvent", _of(m.ProjectEvent, "project")),
        Table("annotation.GuidelinesVersion", _of(m.GuidelinesVersion, "project")),
        Table("annotation.GuidelinesSeen", _of(m.GuidelinesSeen, "project")),
        Table("annotation.Prompt", _of(m.Prompt, "project")),
        Table("annotation.Response", _of(m.Response, "prompt__project")),
        Table("annotation.Comparison", _of(m.Comparison, "project")),
        Table("annotation.Judgement", _of(m.Judgement, "comparison__project")),
        Table("annotation.Assignment", _of(m.Assignment, "comparison__project")),
        Table("annotation.RepeatJudgement", _of(m.RepeatJudgement, "comparison__project")),
        Table("annotation.Flag", _of(m.Flag, "comparison__project")),
        Table("annotation.Adjudication", _of(m.Adjudication, "comparison__project")),
        Table(
            "annotation.ClusteringRun",
            _of(m.ClusteringRun, "project"),
            id_lists={"projection.prompt_ids": "annotation.Prompt"},
        ),
        Table(
            "annotation.PromptCluster",
            _of(m.PromptCluster, "run__project"),
            id_lists={"central_prompt_ids": "annotation.Prompt"},
        ),
        Table("annotation.DatasetExport", _of(m.DatasetExport, "project")),
    ),
)

"""The annotation app's tables in a project archive (see ``common.archive``), in insertion order.

Exports carry their files (pairs, raw judgements, manifest): restored under this instance's
``EXPORT_DIR/<slug>/<sha256>/`` and checked against the export's hash. Restored members get the
role their membership needs. Audit events name rows in ``changes`` only under ``EVENT_ID_KEYS``,
which the restore maps to the restored ids.

A rating or ranking project's items travel with their responses in stored order, every answer
(with the display order it was given in, repeats and gold answers included) and its leases
(answered or skipped: what the queue reads to never hand an item to the same person twice). The
restored project holds no claims: a lease that was active when the archive was written is released
on restore (deleted, its overlap slot given back), as if it had expired.

Left out on purpose: import jobs (they name uploaded files of the old instance) and prompt
embeddings (a cache that clustering recomputes). Registered from ``AnnotationConfig.ready``.
"""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Model, QuerySet

from annotation import models as m
from annotation.services.exporting import export_folder_sha256
from annotation.services.projects import MEMBERSHIP_ROLES, item_leases_release
from common.archive import ArchiveError, ArchivePart, FolderFiles, Table
from common.roles import role_assign

# Keys of a ProjectEvent's ``changes`` (at any depth) that hold an id or a list of ids of these
# models: an event that names rows uses them, so a restore beside other projects remaps them.
EVENT_ID_KEYS = {
    "comparison_id": "annotation.Comparison",
    "comparison_ids": "annotation.Comparison",
    "prompt_id": "annotation.Prompt",
    "prompt_ids": "annotation.Prompt",
    "export_id": "annotation.DatasetExport",
    "adjudication_id": "annotation.Adjudication",
    "clustering_run_id": "annotation.ClusteringRun",
    "guidelines_version_id": "annotation.GuidelinesVersion",
}


def _rename(row: dict[str, Any], options: dict[str, Any]) -> None:
    """The restored project takes the slug it is restored under."""
    row["slug"] = options["slug"]


def _export_folder(export: Model, options: dict[str, Any]) -> Path:
    """Where a restored export's files go: the folder ``dataset_export`` would make for it."""
    return Path(settings.EXPORT_DIR) / options["slug"] / export.sha256


def _export_files_check(export: Model, folder: Path) -> None:
    if export_folder_sha256(folder, export.options) != export.sha256:
        raise ArchiveError(
            f"The files of export {export.sha256[:12]} do not hash to it (in {folder}). Nothing "
            "was restored."
        )


def _members_get_their_roles(maps: dict[str, dict[Any, Any]]) -> None:
    """Each restored member holds the global role their membership needs (as ``member_add``
    gives it): an account matched by username may not have it on this instance."""
    restored = maps.get("annotation.ProjectMembership", {}).values()
    for membership in m.ProjectMembership.objects.filter(pk__in=restored).select_related("user"):
        role_assign(user=membership.user, role=MEMBERSHIP_ROLES[membership.role])


def _active_leases_released(maps: dict[str, dict[Any, Any]]) -> None:
    """The restored project holds no item claims: an item lease active when the archive was
    written is released as an expired one would be, its overlap slot given back."""
    for project in m.Project.objects.filter(pk__in=maps.get("annotation.Project", {}).values()):
        item_leases_release(project=project)


def _after_restore(maps: dict[str, dict[Any, Any]], options: dict[str, Any]) -> None:
    _members_get_their_roles(maps)
    _active_leases_released(maps)


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
        Table(
            "annotation.ProjectEvent",
            _of(m.ProjectEvent, "project"),
            json_ids={"changes": EVENT_ID_KEYS},
        ),
        Table("annotation.GuidelinesVersion", _of(m.GuidelinesVersion, "project")),
        Table("annotation.GuidelinesSeen", _of(m.GuidelinesSeen, "project")),
        Table("annotation.Prompt", _of(m.Prompt, "project")),
        Table("annotation.Response", _of(m.Response, "prompt__project")),
        Table("annotation.TaskItem", _of(m.TaskItem, "project")),
        Table("annotation.TaskItemResponse", _of(m.TaskItemResponse, "item__project")),
        Table("annotation.TaskAnswer", _of(m.TaskAnswer, "item__project")),
        Table("annotation.TaskLease", _of(m.TaskLease, "item__project")),
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
        Table(
            "annotation.DatasetExport",
            _of(m.DatasetExport, "project"),
            files=FolderFiles(
                field="folder", destination=_export_folder, check=_export_files_check
            ),
        ),
    ),
    after_restore=_after_restore,
)

"""python manage.py export_items --project SLUG --format FORMAT (--out FILE.jsonl | --snapshot)"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from annotation.services.item_exports import item_dataset_export
from annotation.services.task_export import TaskExportError, task_export_write


class Command(BaseCommand):
    help = (
        "Export a rating project (items, kto, aspects) or a ranking project (items, listwise, "
        "pairs) as JSONL rows; with --snapshot, a hashed export training runs launch on (kto, "
        "aspects, listwise or pairs)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--format", required=True, choices=["items", "kto", "aspects", "listwise", "pairs"]
        )
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--out", type=Path, help="the JSONL file to write")
        target.add_argument(
            "--snapshot",
            action="store_true",
            help="make a hashed export under EXPORT_DIR (the Manage page's 'Export for training'); "
            "prints its id and hash",
        )

    def handle(
        self, *args, project: str, format: str, out: Path | None, snapshot: bool, **options
    ) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            if snapshot:
                export = item_dataset_export(project=target, row_format=format)
            else:
                n = task_export_write(project=target, row_format=format, out=out)
        except TaskExportError as exc:
            raise CommandError(str(exc)) from exc
        if snapshot:
            self.stdout.write(
                f"export {export.pk} {export.sha256}: {export.n_pairs} {format} rows in "
                f"{export.folder}"
            )
        else:
            self.stdout.write(f"{n} rows written to {out}")

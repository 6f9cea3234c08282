"""python manage.py export_items --project SLUG --format FORMAT --out FILE.jsonl"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from annotation.services.task_export import TaskExportError, task_export_write


class Command(BaseCommand):
    help = (
        "Export a rating project (items, kto, aspects) or a ranking project (items, listwise, "
        "pairs) as JSONL rows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--format", required=True, choices=["items", "kto", "aspects", "listwise", "pairs"]
        )
        parser.add_argument("--out", required=True, type=Path, help="the JSONL file to write")

    def handle(self, *args, project: str, format: str, out: Path, **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            n = task_export_write(project=target, row_format=format, out=out)
        except TaskExportError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{n} rows written to {out}")

"""python manage.py import_comparisons PATH --project SLUG"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.importing import ImportValidationError
from annotation.services import project_import


class Command(BaseCommand):
    help = (
        "Import comparison JSONL into a project (created if missing). All or nothing: a bad line "
        "is reported with its number and field, and nothing is imported."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--project", required=True, help="project slug")

    def _progress(self, phase: str, done: int, total: int | None) -> None:
        of = f" of {total}" if total else ""
        self.stderr.write(f"{phase}: {done}{of} rows")

    def handle(self, *args, path: Path, project: str, **options) -> None:
        if not path.is_file():
            raise CommandError(f"{path} does not exist")
        try:
            target, created, result = project_import(
                slug=project, lines=path, progress=self._progress
            )
        except ImportValidationError as exc:
            for error in exc.errors:
                self.stderr.write(str(error))
            raise CommandError(f"{exc.total} error(s) in {path}; nothing imported") from exc
        except ValueError as exc:
            raise CommandError(f"{path}: {exc}; nothing imported") from exc
        if created:
            self.stdout.write(f"created project {target.slug!r}")
        self.stdout.write(result.summary())

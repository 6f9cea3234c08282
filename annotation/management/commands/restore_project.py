"""python manage.py restore_project FILE [--as NEW_SLUG]"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.services.archives import project_archive_restore
from common.errors import ConcordError


class Command(BaseCommand):
    help = (
        "Load a project archive written by archive_project, all or nothing. The whole file is "
        "checked first (a truncated or altered archive is refused and nothing is written). "
        "Accounts are matched by username; missing ones are created inactive, with no password."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="the archive file")
        parser.add_argument(
            "--as",
            dest="slug",
            default=None,
            help="restore under this slug (required when the archived slug exists here)",
        )

    def handle(self, *args: object, **options: object) -> None:
        try:
            project, counts = project_archive_restore(
                path=Path(options["file"]).expanduser(), slug=options["slug"]
            )
        except ConcordError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"restored {project.slug}: {sum(counts.values())} rows in {len(counts)} tables"
        )

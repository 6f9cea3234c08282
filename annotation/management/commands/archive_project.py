"""python manage.py archive_project --project SLUG --out FILE"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from annotation.services.archives import project_archive_write
from common.errors import ConcordError


class Command(BaseCommand):
    help = (
        "Write the project's whole history (prompts, responses, comparisons, judgements, gold and "
        "repeats, guideline versions, adjudications, events, clustering, exports, training runs' "
        "configs and metrics but not their weights, eval rounds, judges and verdicts) to one "
        "archive file that restore_project loads into another instance."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--out", required=True, type=Path, help="archive file to write (.zip)")

    def handle(self, *args: object, **options: object) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project with slug {options['project']!r}")
        out: Path = Path(options["out"]).expanduser()
        partial = out.with_name(out.name + ".part")
        try:
            manifest = project_archive_write(project=project, out=partial)
        except ConcordError as exc:
            partial.unlink(missing_ok=True)
            raise CommandError(str(exc)) from exc
        partial.replace(out)
        rows = sum(m["rows"] for m in manifest["members"])
        self.stdout.write(
            f"archived {project.slug}: {rows} rows in {len(manifest['members'])} tables -> {out}"
        )

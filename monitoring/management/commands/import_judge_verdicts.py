"""python manage.py import_judge_verdicts --project SLUG --judge NAME --file F
--description TEXT [--format jsonl|mt_bench]

Creates the next version of an imported judge with the verdicts of a file (one line per
comparison: one order, both, or as its source combined them). All or nothing: a bad line refuses
the file, naming every bad line. Prints what was stored; ``judge_report`` measures it.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from common.errors import ConcordError
from monitoring.services.judge_imports import judge_verdicts_import
from monitoring.stats.verdict_files import FORMATS


class Command(BaseCommand):
    help = "Import a judge's verdicts from a file as the next version of an imported judge."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--judge", required=True, help="judge name (a slug)")
        parser.add_argument("--file", required=True, type=Path, help="the verdicts, JSONL")
        parser.add_argument(
            "--description",
            required=True,
            help="whose verdicts these are and where they come from (stored with the judge)",
        )
        parser.add_argument("--format", choices=FORMATS, default="jsonl", dest="fmt")

    def handle(
        self, *args, project: str, judge: str, file: Path, description: str, fmt: str, **options
    ) -> None:
        try:
            target = Project.objects.get(slug=project)
        except Project.DoesNotExist as exc:
            raise CommandError(f"no project with slug {project!r}") from exc
        try:
            with file.open(encoding="utf-8") as handle:
                result = judge_verdicts_import(
                    project=target, name=judge, description=description, lines=handle, fmt=fmt,
                    source_name=file.name,
                )  # fmt: skip
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise CommandError(f"{file} is not UTF-8 text: {exc.reason}") from exc
        except ConcordError as exc:
            raise CommandError(str(exc)) from exc
        j = result.judge
        self.stdout.write(
            f"{j.name} v{j.version} (imported) on {target.slug}: {result.comparisons} comparisons, "
            f"{result.per_order} with per-order verdicts, {result.combined} combined "
            f"({result.inconsistent} inconsistent across orders)"
        )

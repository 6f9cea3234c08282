"""``python manage.py consensus_backfill [--project SLUG]``: fit every project's (or one project's)
Dawid-Skene consensus now and write its stored rows (``annotation.services.consensus``).

For projects that existed before the stored consensus (migration 0012 writes their majority
figures; Dawid-Skene waits for a fit), or to refit at once instead of waiting for the debounced
task. The EM starts from the project's stored fit when it has one (``--cold``: from the majority
vote, as the export's fit does, so the stored posteriors equal the export's). Prints one line per
project: judgements, EM iterations, rows written, seconds.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from annotation.services.consensus import consensus_refit


class Command(BaseCommand):
    help = "Fit the Dawid-Skene consensus of every project (or one) and store it per comparison."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", default="", help="Only this project's slug.")
        parser.add_argument(
            "--cold",
            action="store_true",
            help="Start the EM from the majority vote, not from the stored fit.",
        )

    def handle(self, *args, project: str, cold: bool, **options) -> None:
        projects = Project.objects.order_by("pk")
        if project:
            projects = projects.filter(slug=project)
            if not projects.exists():
                raise CommandError(f"no project {project!r}")
        for target in projects:
            started = time.perf_counter()
            result = consensus_refit(project=target, force=True, warm=not cold)
            self.stdout.write(
                f"{target.slug}: {result.n_judgements} judgements, {result.iterations} "
                f"iterations, {result.n_rows} comparisons, {time.perf_counter() - started:.1f} s"
            )

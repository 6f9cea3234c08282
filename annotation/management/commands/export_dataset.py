"""python manage.py export_dataset --project SLUG --out PATH [--keep-ties] [--min-judgements N]"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.exporting import dataset_export, export_copy
from annotation.models import Project


class Command(BaseCommand):
    help = (
        "Freeze the project's judgements into an immutable, hashed TRL-style export and copy it to "
        "PATH (pairs) and PATH.judgements.jsonl (raw per-annotator rows)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--out", required=True, type=Path, help="where to write pairs JSONL")
        parser.add_argument("--keep-ties", action="store_true", help="keep tied pairs (margin 0)")
        parser.add_argument("--min-judgements", type=int, default=1)
        parser.add_argument(
            "--consensus",
            choices=["majority", "dawid_skene"],
            default="majority",
            help="majority vote, or Dawid-Skene (annotator reliability) posteriors",
        )

    def handle(
        self, *args, project: str, out: Path, keep_ties: bool, min_judgements: int,
        consensus: str, **o,
    ):  # fmt: skip
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            export = dataset_export(
                project=target,
                keep_ties=keep_ties,
                min_judgements=min_judgements,
                consensus=consensus,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        pairs, raw = export_copy(export, out)
        self.stdout.write(
            f"export {export.sha256} ({export.n_pairs} pairs, {export.n_judgements} judgements, "
            f"{export.n_ties_dropped} ties dropped)\n  pairs:      {pairs}\n  judgements: {raw}"
        )

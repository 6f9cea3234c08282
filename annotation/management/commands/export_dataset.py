"""python manage.py export_dataset --project SLUG [--out PATH] [--format jsonl|hf] [--keep-ties] ..."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import DatasetExport, Project
from annotation.services.exporting import (
    CONSENSUS_RULES,
    FALLBACK_RULES,
    dataset_export,
    export_copy,
)
from annotation.services.hf_export import hf_export_write

HF_PROGRESS_ROWS = 50_000  # pairs between two progress lines of --format hf


def _out_path(out: Path | None, *, export: DatasetExport, format: str) -> Path:
    """Where the copy goes: the path the user gave, as given (a jsonl copy into a folder that exists
    is named after the export there); else var/exports/SLUG/SLUG-SHA12.jsonl (jsonl) or
    var/exports/SLUG/SLUG-SHA12-hf/ (hf), beside the export's frozen SHA folder."""
    name = f"{export.project.slug}-{export.sha256[:12]}"
    if out is None:
        folder = Path(settings.EXPORT_DIR) / export.project.slug
        return folder / (f"{name}-hf" if format == "hf" else f"{name}.jsonl")
    out = out.expanduser()
    if format == "jsonl" and out.is_dir():
        return out / f"{name}.jsonl"
    return out


class Command(BaseCommand):
    help = (
        "Freeze the project's judgements into an immutable, hashed export. --format jsonl "
        "(default): copy it to PATH (TRL-style pairs) and PATH.judgements.jsonl (raw rows). "
        "--format hf: write the folder PATH as a Hugging Face dataset (Parquet train/test split "
        "by prompt, dataset card README.md) that datasets.load_dataset(PATH) loads. Without --out "
        "the files go under var/exports/SLUG/, named after the export's hash."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--out",
            type=Path,
            default=None,
            help="pairs JSONL file (jsonl) or folder (hf); default var/exports/SLUG/SLUG-SHA12.jsonl "
            "(jsonl) or var/exports/SLUG/SLUG-SHA12-hf/ (hf)",
        )
        parser.add_argument("--format", choices=["jsonl", "hf"], default="jsonl")
        parser.add_argument("--keep-ties", action="store_true", help="keep tied pairs (margin 0)")
        parser.add_argument("--min-judgements", type=int, default=1)
        parser.add_argument(
            "--consensus",
            choices=list(CONSENSUS_RULES),
            default="majority",
            help="majority vote, Dawid-Skene (annotator reliability) posteriors, or adjudicated "
            "(the adjudicators' verdicts where they exist, --fallback elsewhere)",
        )
        parser.add_argument(
            "--fallback",
            choices=list(FALLBACK_RULES),
            default="majority",
            help="with --consensus adjudicated: the rule for pairs without a verdict (default majority)",
        )
        parser.add_argument(
            "--test-fraction",
            type=float,
            default=0.1,
            help="hf: share of each prompt cluster's prompts in the test split (default 0.1)",
        )
        parser.add_argument(
            "--license",
            default="other",
            help="hf: the data's licence for the dataset card, e.g. cc-by-4.0 (default: other)",
        )

    def _progress(self, done: int, total: int) -> None:
        """One line on stderr per written chunk: judged comparisons done of the total."""
        self.stderr.write(f"exported {done:,} of {total:,} judged comparisons")

    def _hf_progress(self, done: int, total: int) -> None:
        """One line on stderr every HF_PROGRESS_ROWS pairs written as Parquet, and at the end."""
        if done % HF_PROGRESS_ROWS == 0 or done == total:
            self.stderr.write(f"wrote {done:,} of {total:,} pairs as Parquet")

    def handle(
        self, *args, project: str, out: Path | None, format: str, keep_ties: bool, min_judgements: int,
        consensus: str, fallback: str, test_fraction: float, license: str, **o,
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
                fallback=fallback,
                progress=self._progress,
            )
            out = _out_path(out, export=export, format=format)
            if format == "hf":
                written = hf_export_write(
                    export=export, out=out, test_fraction=test_fraction, license=license,
                    progress=self._hf_progress,
                )  # fmt: skip
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        counts = (
            f"export {export.sha256} ({export.n_pairs} pairs, {export.n_judgements} judgements, "
            f"{export.n_ties_dropped} ties dropped"
            + (
                f", {export.options['pairs_adjudicated']} from adjudication)"
                if "pairs_adjudicated" in export.options
                else ")"
            )
        )
        if format == "hf":
            self.stdout.write(
                f"{counts}\n  Hugging Face dataset: {written.folder} "
                f"(train {written.rows['train']} rows, test {written.rows['test']} rows)"
            )
            return
        pairs, raw = export_copy(export, out)
        self.stdout.write(f"{counts}\n  pairs:      {pairs}\n  judgements: {raw}")

"""python manage.py import_comparisons PATH --project SLUG [--format auto|NAME] [--skip-invalid]"""

import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import formats
from annotation.formats.mt_bench import load_answers, load_questions
from annotation.parsing import ImportValidationError
from annotation.services.import_result import ProgressMeter
from annotation.services.importing import ImportOptions, project_import

SHOWN_ERRORS = 50


class Command(BaseCommand):
    help = (
        "Import preference data into a project (created if missing): Concord JSONL, TRL, "
        "HH-RLHF, PandaLM, MT-Bench/Chatbot Arena, UltraFeedback or HelpSteer2, as JSONL, a JSON "
        "array, Parquet, or gzip/zstd-compressed JSONL. All or nothing: a bad row is reported "
        "with its number and field, and nothing is imported (unless --skip-invalid)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--format",
            default="auto",
            choices=formats.FORMAT_NAMES,
            help="the file's format; auto (default) tells it from the first record's fields",
        )
        parser.add_argument(
            "--skip-invalid",
            action="store_true",
            help="import the valid rows; write the rejected ones with their reasons to "
            "PATH.rejected.jsonl (default: all or nothing)",
        )
        parser.add_argument(
            "--scalars-as-text",
            action="store_true",
            help="a response that is a JSON number or boolean is imported as its JSON text",
        )
        parser.add_argument(
            "--label-as",
            default=None,
            help="annotator name for a single-label file's preference (TRL, HH-RLHF, "
            "UltraFeedback, HelpSteer2); '' for none",
        )
        parser.add_argument(
            "--questions", type=Path, help="MT-Bench: FastChat question.jsonl (texts by file)"
        )
        parser.add_argument(
            "--answers", type=Path, help="MT-Bench: FastChat model_answer/ folder of <model>.jsonl"
        )

    def _progress(self, phase: str, done: int, total: int | None) -> None:
        """One line with the rate and the time left; at most one a second, and each phase's end."""
        line = self._meter.line(phase, done, total)  # always measured, so the rate stays exact
        now = time.monotonic()
        if phase != self._shown[0] or now - self._shown[1] >= 1.0 or done == total:
            self.stderr.write(line)
            self._shown = (phase, now)

    def handle(
        self,
        *args,
        path: Path,
        project: str,
        format: str,
        skip_invalid: bool,
        scalars_as_text: bool,
        label_as: str | None,
        questions: Path | None,
        answers: Path | None,
        **options,
    ) -> None:
        if not path.is_file():
            raise CommandError(f"{path} does not exist")
        self._meter = ProgressMeter()
        self._shown = ("", 0.0)
        try:
            read = formats.ReadOptions(
                scalars_as_text=scalars_as_text,
                label_as=label_as,
                questions=load_questions(questions) if questions else None,
                answers=load_answers(answers) if answers else None,
                questions_name=str(questions or "--questions"),
                answers_name=str(answers or "--answers"),
            )
            target, created, result = project_import(
                slug=project,
                lines=path,
                progress=self._progress,
                options=ImportOptions(format=format, read=read, skip_invalid=skip_invalid),
            )
        except ImportValidationError as exc:
            for error in exc.errors[:SHOWN_ERRORS]:
                self.stderr.write(str(error))
            if exc.total > SHOWN_ERRORS:
                self.stderr.write(f"... and {exc.total - SHOWN_ERRORS} more")
            raise CommandError(f"{exc.total} error(s) in {path}; nothing imported") from exc
        except (ValueError, OSError) as exc:
            raise CommandError(f"{path}: {exc}; nothing imported") from exc
        if created:
            self.stdout.write(f"created project {target.slug!r}")
        if format == "auto":
            self.stdout.write(f"format: {result.format} (recognised from the fields)")
        self.stdout.write(result.summary())

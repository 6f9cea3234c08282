"""Writes of imported judges: a judge whose verdicts come from a file (released verdicts such as
GPT-4's on MT-Bench, or any judge run elsewhere), stored as a new version of a judge of kind
"imported" with its machine annotator, exactly as a local judge's answers are stored.

One verdict per comparison, in one order, in both, or as the source combined them (a released
"tie (inconsistent)" kept as such: ``JudgeOutput.orders_disagree``). Comparisons are matched by
Concord id, external id or texts (``monitoring.stats.verdict_files``). All or nothing: any bad
line refuses the whole file, naming every bad line, and nothing is written. The combined verdicts
become judgements of the machine annotator (``judge_verdicts_store``), which, like every judge's,
never count as a person's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from annotation.models import Comparison, Project
from common.text import storable_text
from monitoring.models import Judge, JudgeOutput
from monitoring.services.judges import JudgeError, judge_create, judge_verdicts_store
from monitoring.stats.verdict_files import (
    FORMATS,
    INCONSISTENT,
    FileVerdict,
    VerdictRowError,
    read_verdict_file,
)

SHOWN_ERRORS = 20  # bad lines named in the error message; the rest are counted
FLIP = {"a": "b", "b": "a", "tie": "tie", INCONSISTENT: INCONSISTENT}


class VerdictFileError(JudgeError):
    """A verdict file refused as a whole: ``errors`` holds one message per bad line."""

    def __init__(self, errors: list[str]) -> None:
        shown = "; ".join(errors[:SHOWN_ERRORS])
        more = f"; and {len(errors) - SHOWN_ERRORS} more" if len(errors) > SHOWN_ERRORS else ""
        super().__init__(f"{len(errors)} bad line(s), nothing imported: {shown}{more}")
        self.errors = errors


@dataclass(frozen=True)
class VerdictImport:
    """What an import stored: the new judge version; comparisons with a verdict; those given per
    order (one or both orders), as a combined verdict, and combined as order-inconsistent."""

    judge: Judge
    comparisons: int
    per_order: int
    combined: int
    inconsistent: int


def _conversation_key(prompt: object) -> tuple[tuple[str, str], ...] | None:
    """A prompt as ((role, content), ...): a string is one user turn; None if malformed."""
    if isinstance(prompt, str):
        return (("user", prompt),)
    if isinstance(prompt, list) and all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt
    ):
        return tuple((str(m.get("role", "user")), m["content"]) for m in prompt)
    return None


class _Matcher:
    """The project's comparisons by id, external id and texts (read once)."""

    def __init__(self, project: Project) -> None:
        self.by_id: dict[int, int] = {}
        self.by_external: dict[str, list[int]] = {}
        self.by_texts: dict[tuple, list[tuple[int, bool]]] = {}
        comparisons = Comparison.objects.filter(project=project).select_related(
            "prompt", "response_a", "response_b"
        )
        for c in comparisons.order_by("pk"):
            self.by_id[c.pk] = c.pk
            if c.external_id:
                self.by_external.setdefault(c.external_id, []).append(c.pk)
            prompt = c.prompt.messages or [{"role": "user", "content": c.prompt.text}]
            key = _conversation_key(prompt)
            a, b = c.response_a.text, c.response_b.text
            self.by_texts.setdefault((key, a, b), []).append((c.pk, False))
            self.by_texts.setdefault((key, b, a), []).append((c.pk, True))

    def find(self, row: FileVerdict) -> tuple[int, bool]:
        """(comparison id, swapped: the row's A is the stored B); VerdictRowError if none or
        several match."""
        if row.comparison_id is not None:
            if row.comparison_id not in self.by_id:
                raise VerdictRowError(
                    row.line, "comparison_id", f"no comparison {row.comparison_id} in this project"
                )
            return row.comparison_id, False
        if row.external_id is not None:
            found = self.by_external.get(row.external_id, [])
            if len(found) != 1:
                what = "no comparison" if not found else f"{len(found)} comparisons"
                raise VerdictRowError(row.line, "id", f"{what} with id {row.external_id!r}")
            return found[0], row.swapped
        prompt, a, b = row.texts or (None, "", "")
        key = _conversation_key(prompt)
        if key is None:
            raise VerdictRowError(row.line, "prompt", "must be text or a list of messages")
        found = self.by_texts.get((key, a, b), [])
        if len({pk for pk, _ in found}) != 1:
            what = "no comparison" if not found else f"{len(found)} comparisons"
            raise VerdictRowError(row.line, "prompt", f"{what} with this prompt and responses")
        return found[0]


def _outputs(judge: Judge, pk: int, row: FileVerdict, swapped: bool) -> list[JudgeOutput]:
    """The row's verdicts as the judge's outputs, in stored terms."""
    raw = storable_text(row.raw)
    if row.combined is not None:
        verdict = FLIP[row.combined] if swapped else row.combined
        disagree = verdict == INCONSISTENT
        return [
            JudgeOutput(
                judge=judge, comparison_id=pk, shown_first="", raw=raw,
                verdict="tie" if disagree else verdict, orders_disagree=disagree, seconds=0.0,
            )
        ]  # fmt: skip
    return [
        JudgeOutput(
            judge=judge, comparison_id=pk, shown_first=FLIP[first] if swapped else first,
            raw=raw, verdict=FLIP[verdict] if swapped else verdict, seconds=0.0,
        )
        for first, verdict in row.orders.items()
    ]  # fmt: skip


def judge_verdicts_import(
    *,
    project: Project,
    name: str,
    description: str,
    lines: Iterable[str],
    fmt: str,
    source_name: str = "",
    created_by: AbstractBaseUser | None = None,
) -> VerdictImport:
    """Create the next version of the imported judge ``name`` of ``project`` with the verdicts of
    the file ``lines`` in format ``fmt`` (``verdict_files.FORMATS``). ``description``: whose the
    verdicts are and where they come from (required). Every line must name one comparison of the
    project, each comparison at most once; otherwise VerdictFileError lists the bad lines and
    nothing is written (no judge version, no account, no verdict)."""
    if fmt not in FORMATS:
        raise JudgeError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if not description.strip():
        raise JudgeError("description: say whose verdicts these are and where they come from")
    rows, row_errors = read_verdict_file(lines, fmt=fmt)
    errors = [str(e) for e in row_errors]
    matcher = _Matcher(project)
    matched: list[tuple[FileVerdict, int, bool]] = []
    seen: dict[int, int] = {}
    for row in rows:
        try:
            pk, swapped = matcher.find(row)
        except VerdictRowError as exc:
            errors.append(str(exc))
            continue
        if pk in seen:
            errors.append(
                f"line {row.line}: comparison: comparison {pk} already has a verdict on line "
                f"{seen[pk]} (one line per comparison; give both orders on one line)"
            )
            continue
        seen[pk] = row.line
        matched.append((row, pk, swapped))
    if errors:
        raise VerdictFileError(sorted(errors, key=_line_number))
    if not matched:
        raise VerdictFileError(["the file holds no verdicts"])
    with transaction.atomic():
        judge = judge_create(
            project=project, name=name, kind=Judge.Kind.IMPORTED, created_by=created_by,
            description=description.strip(),
        )  # fmt: skip
        outputs = [o for row, pk, swapped in matched for o in _outputs(judge, pk, row, swapped)]
        JudgeOutput.objects.bulk_create(outputs)
        judge_verdicts_store(judge=judge)
        now = timezone.now()
        Judge.objects.filter(pk=judge.pk).update(
            status=Judge.Status.SUCCEEDED, done=len(outputs), total=len(outputs),
            source_name=source_name[:255], started_at=now, finished_at=now,
        )  # fmt: skip
    judge.refresh_from_db()
    combined = [row for row, _, _ in matched if row.combined is not None]
    return VerdictImport(
        judge=judge,
        comparisons=len(matched),
        per_order=len(matched) - len(combined),
        combined=len(combined),
        inconsistent=sum(row.combined == INCONSISTENT for row in combined),
    )


def _line_number(message: str) -> int:
    head = message.split(":", 1)[0]
    return int(head.removeprefix("line ")) if head.startswith("line ") else 0

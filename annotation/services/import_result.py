"""The counts of one import and the summary line the command, the upload page and the API show."""

from __future__ import annotations

from dataclasses import dataclass


def _count(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun in the number it needs: "1 row", "2 rows", "0 rows"."""
    return f"{n} {one if n == 1 else many or one + 's'}"


@dataclass(frozen=True)
class ImportResult:
    """Counts of one import: rows read, comparisons created or already present, and so on.

    ``format``/``container``: what the file was read as (what ``auto`` chose). ``rows_rejected``:
    rows left out under ``skip_invalid`` (listed in ``rejects_path``). ``empty_responses``: empty or
    whitespace-only responses among the rows read. ``repeated_votes``: a judge's vote repeated with
    the same verdict (formats where that counts once). ``scalars_as_text``: JSON numbers or booleans
    of the imported rows read as their text (``ReadOptions.scalars_as_text``).
    """

    rows: int
    comparisons_created: int
    comparisons_existing: int
    judgements_created: int
    judgements_existing: int
    annotators_created: int
    format: str = "concord"
    container: str = "jsonl"
    rows_rejected: int = 0
    empty_responses: int = 0
    repeated_votes: int = 0
    rejects_path: str = ""
    scalars_as_text: int = 0

    def summary(self) -> str:
        text = (
            f"{_count(self.rows, 'row')}: {_count(self.comparisons_created, 'comparison')} "
            f"created, {self.comparisons_existing} already present; "
            f"{_count(self.judgements_created, 'judgement')} created, "
            f"{self.judgements_existing} already present; "
            f"{_count(self.annotators_created, 'annotator account')} created; "
            f"{_count(self.empty_responses, 'empty response')}"
        )
        if self.repeated_votes:
            text += f"; {_count(self.repeated_votes, 'repeated vote')} counted once"
        if self.scalars_as_text:
            values = _count(
                self.scalars_as_text, "JSON number or boolean", "JSON numbers or booleans"
            )
            text += f"; {values} imported as text"
        if self.rows_rejected or self.rejects_path:
            text += (
                f"; {_count(self.rows - self.rows_rejected, 'row')} imported, "
                f"{self.rows_rejected} rejected"
                + (f" (listed in {self.rejects_path})" if self.rejects_path else "")
            )
        return f"{self.format} ({self.container}): {text}"

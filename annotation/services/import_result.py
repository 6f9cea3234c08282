"""The counts of one import and the summary line the command, the upload page and the API show."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


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


def duration_text(seconds: float) -> str:
    """A duration for people: "45 s", "3 min 20 s", "1 h 05 min"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass
class ProgressMeter:
    """Rate and time left of an import's phases, from the progress callback's figures.

    ``figures(phase, rows_done, rows_total)`` is called with each report; the rate (rows per
    second) is measured from the phase's first report, and the time left (``eta_s``) is the rows
    still to do at that rate, when the total is known. ``rows_total`` may be an estimate (the
    newlines of a JSONL file), so the time left is about. ``clock``: seconds, monotonic.
    """

    clock: Callable[[], float] = time.monotonic
    _phase: str = field(default="", init=False)
    _started: float = field(default=0.0, init=False)
    _done_at_start: int = field(default=0, init=False)

    def figures(self, phase: str, rows_done: int, rows_total: int | None) -> dict[str, object]:
        now = self.clock()
        if phase != self._phase:
            self._phase, self._started, self._done_at_start = phase, now, rows_done
        elapsed = now - self._started
        done = rows_done - self._done_at_start
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        eta = None
        if rate and rows_total is not None and rows_total >= rows_done:
            eta = (rows_total - rows_done) / rate
        return {
            "phase": phase,
            "rows_done": rows_done,
            "rows_total": rows_total,
            "rows_per_s": round(rate) if rate is not None else None,
            "eta_s": round(eta) if eta is not None else None,
        }

    def line(self, phase: str, rows_done: int, rows_total: int | None) -> str:
        """One line for a terminal: "validating: 20000 of about 100000 rows, 5120 rows/s, 15 s left"."""
        figures = self.figures(phase, rows_done, rows_total)
        text = f"{phase}: {rows_done}"
        if rows_total:
            text += f" of about {rows_total}" if phase == "validating" else f" of {rows_total}"
        text += " rows"
        if figures["rows_per_s"] is not None:
            text += f", {figures['rows_per_s']} rows/s"
        if figures["eta_s"] is not None:
            text += f", {duration_text(figures['eta_s'])} left"
        return text

"""The interval types every statistic of monitoring.stats returns or reads: ``Interval`` (a point
estimate with its two-sided confidence interval) and ``EstimateChoice`` (the estimate the stopping
panel uses, human-only or prediction-powered, and why). Pure: no Django, no project imports, so the
stopping rules (stopping.py) and the prediction-powered estimates (ppi.py) both import it and
neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval [low, high]."""

    estimate: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n}


@dataclass(frozen=True)
class EstimateChoice:
    """The estimate the stopping panel uses. source: "ppi" or "human"; reason: one sentence for the
    reviewer saying which and why."""

    source: str
    interval: Interval
    reason: str

"""How a recipe reports progress and metrics, and learns that it should stop.

The recipe calls a ``TrainingCallback``; the caller decides what that means (write metric rows and a
heartbeat to the database, print JSON lines, poll a cancel flag). Recipes never import Django or
Celery. Override only what you need: every method of the base class does nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO


class TrainingCallback:
    """Hooks a training loop calls, in this order: start, then per step (progress, maybe log, maybe
    checkpoint, should_stop), then end."""

    def on_start(self, *, total_steps: int, config: Mapping[str, Any]) -> None:
        """Before the first step; ``config`` is the resolved configuration."""

    def on_phase(self, *, phase: str, done: int, total: int) -> None:
        """Progress of work before (or between) steps, e.g. ``phase="reference log-probs"``,
        ``done=3``, ``total=4`` batches; ``total`` 0 when unknown. Also a heartbeat."""

    def on_step(self, *, step: int, total_steps: int) -> None:
        """After every optimiser step (1-based ``step``): progress and heartbeat."""

    def on_log(self, *, step: int, metrics: Mapping[str, float]) -> None:
        """Every ``log_every`` steps, and once at the end with evaluation metrics."""

    def on_checkpoint(self, *, step: int, path: Path) -> None:
        """After a checkpoint is complete on disk."""

    def on_samples(self, *, step: int, samples: Sequence[Mapping[str, Any]]) -> None:
        """A few generations kept at an evaluation step (online kinds): each a mapping with at
        least ``prompt`` and ``response`` (text) and ``reward`` (float), plus any per-sample
        figures the recipe has (``score``, ``kl``, ``length``)."""

    def should_stop(self) -> bool:
        """Polled after every step; True stops cleanly (a checkpoint is written first)."""
        return False

    def on_end(self, *, status: str, summary: Mapping[str, Any]) -> None:
        """Once, with status 'completed' or 'cancelled' and the run summary."""


class CallbackList(TrainingCallback):
    """Fan one call out to several callbacks; stop when any of them asks to."""

    def __init__(self, callbacks: Sequence[TrainingCallback]) -> None:
        self.callbacks = list(callbacks)

    def on_start(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_start(**kwargs)

    def on_phase(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_phase(**kwargs)

    def on_step(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_step(**kwargs)

    def on_log(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_log(**kwargs)

    def on_checkpoint(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_checkpoint(**kwargs)

    def on_samples(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_samples(**kwargs)

    def should_stop(self) -> bool:
        return any(callback.should_stop() for callback in self.callbacks)

    def on_end(self, **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_end(**kwargs)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class JsonLinesReporter(TrainingCallback):
    """Writes one JSON object per logged step, and the summary at the end, to a text stream."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def _write(self, row: Mapping[str, Any]) -> None:
        self.stream.write(json.dumps({k: _json_safe(v) for k, v in row.items()}) + "\n")
        self.stream.flush()

    def on_log(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self._write({"step": step, **metrics})

    def on_end(self, *, status: str, summary: Mapping[str, Any]) -> None:
        self._write({"event": "summary", "status": status, **summary})


class MetricsFile(TrainingCallback):
    """Appends every logged row to ``metrics.jsonl`` in the run folder."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, *, step: int, metrics: Mapping[str, float]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(
                json.dumps({"step": step, **{k: _json_safe(v) for k, v in metrics.items()}})
            )
            handle.write("\n")

"""Writes of what a running recipe reports besides steps and metrics: the phase of work before the
first step (the DPO reference pass), and the generations an online run keeps at evaluation steps.

The worker's callback calls these; the run page reads them back through monitoring's selectors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from common.text import storable_text
from training.models import RunSample, TrainingRun

SAMPLE_TEXT_MAX_CHARS = 4000  # a prompt or response longer than this is cut (the page is a glance)
SAMPLES_PER_STEP_MAX = 32


def run_phase_record(*, run_id: int, phase: str, done: int, total: int) -> None:
    """Store the run's current phase (``done`` of ``total`` units; ``total`` 0 when unknown) and
    refresh its heartbeat."""
    if not phase.strip():
        raise ValueError("phase: give the phase a name")
    if done < 0 or total < 0:
        raise ValueError(f"done={done}, total={total}: counts cannot be negative")
    TrainingRun.objects.filter(pk=run_id).update(
        phase=phase[:64], phase_done=done, phase_total=total, heartbeat_at=timezone.now()
    )


def run_phase_clear(*, run_id: int) -> None:
    """The run is stepping again: forget the phase."""
    TrainingRun.objects.filter(pk=run_id).exclude(phase="").update(
        phase="", phase_done=0, phase_total=0
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _storable_text(value: object) -> str:
    """``value`` as text PostgreSQL can store (``common.text.storable_text``: NUL becomes U+FFFD),
    cut at SAMPLE_TEXT_MAX_CHARS."""
    return storable_text(value)[:SAMPLE_TEXT_MAX_CHARS]


def samples_record(*, run_id: int, step: int, samples: Sequence[Mapping[str, Any]]) -> int:
    """Store the generations kept at ``step`` (a step recorded again, after a resume, replaces its
    samples); returns how many were stored.

    Each sample: ``prompt`` and ``response`` (text, cut at SAMPLE_TEXT_MAX_CHARS; a NUL character,
    which a model may sample and PostgreSQL text cannot hold, is stored as U+FFFD), ``reward``
    (float or None), and any other numeric entries as per-sample figures (non-finite ones dropped).
    At most SAMPLES_PER_STEP_MAX are kept.
    """
    rows = []
    for position, sample in enumerate(samples[:SAMPLES_PER_STEP_MAX]):
        if "prompt" not in sample or "response" not in sample:
            raise ValueError(f"samples[{position}]: needs 'prompt' and 'response'")
        figures = {
            name: number
            for name, value in sample.items()
            if name not in ("prompt", "response", "reward")
            and (number := _number(value)) is not None
        }
        rows.append(
            RunSample(
                run_id=run_id,
                step=step,
                position=position,
                prompt=_storable_text(sample["prompt"]),
                response=_storable_text(sample["response"]),
                reward=_number(sample.get("reward")),
                figures=figures,
            )
        )
    with transaction.atomic():
        RunSample.objects.filter(run_id=run_id, step=step).delete()
        RunSample.objects.bulk_create(rows)
    return len(rows)

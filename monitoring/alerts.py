"""Alert rules on training metrics (the thresholds of PIPELINE.md, configurable in settings).

``evaluate_metrics`` is the hook training calls after each logged step (settings.CONCORD_METRICS_HOOK
names it, so training never imports monitoring). A metric beyond its threshold opens an alert (one
open alert per run and metric); back within the threshold, the open alert is resolved.

A rule with ``relative_to_first`` compares against a multiple of the run's first logged value of its
metric instead of a fixed number: "ensemble disagreement rising" opens when the members' disagreement
on the policy's held-out answers reaches twice its value at the first evaluation (PIPELINE.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from monitoring.models import Alert
from training.models import MetricPoint

# PIPELINE.md's diagnosis order, step by step.
DIAGNOSIS = {
    1: "(1) KL too high: check the KL coefficient and that the reference model loaded correctly.",
    2: "(2) Reward variance: the reward model may be over-fitting or hacked; run the hacking check.",
    3: "(3) Value loss jumps: check that padding does not leak into the value input.",
    4: "(4) Grammar or diversity degrades: the rollout temperature may be too high.",
    5: "(5) One prompt type degrades: check batch balance and the prompt clustering.",
    6: "Accelerator memory: lower the micro-batch, enable gradient checkpointing or ZeRO offload.",
    7: "Samples end at max_new_tokens: raise max_new_tokens to fit the answers the data expects, "
    "or lower missing_eos_penalty (0: off) so the reward model's score leads.",
}


@dataclass(frozen=True)
class Rule:
    """metric (name as logged), direction ('>' or '<'), threshold, meaning, diagnosis step;
    ``relative_to_first``: the threshold is a factor on the run's first logged value of the metric
    (the limit is threshold x first value), not a value of its own."""

    metric: str
    direction: str
    threshold: float
    meaning: str
    diagnosis_step: int
    relative_to_first: bool = False

    def limit(self, first: float | None) -> float | None:
        """The threshold in the metric's units: ``threshold``, or for a relative rule
        ``threshold * first`` (None while the run has no earlier value: nothing to compare)."""
        if not self.relative_to_first:
            return self.threshold
        return None if first is None or not math.isfinite(first) else self.threshold * first

    def breached(self, value: float, limit: float | None = None) -> bool:
        """Whether ``value`` is beyond ``limit`` (default: the rule's own threshold); a value that
        is not finite always is."""
        if not math.isfinite(value):
            return True
        bound = self.threshold if limit is None else limit
        return value > bound if self.direction == ">" else value < bound


def alert_rules() -> list[Rule]:
    """The rules in force: settings.CONCORD_ALERT_RULES (defaults from PIPELINE.md)."""
    return [Rule(**rule) for rule in settings.CONCORD_ALERT_RULES]


def evaluate_metrics(*, run_id: int, step: int, metrics: Mapping[str, float]) -> list[Alert]:
    """Open or resolve alerts of the run for the metrics logged at ``step``; returns new alerts."""
    opened: list[Alert] = []
    now = timezone.now()
    for rule in alert_rules():
        if rule.metric not in metrics:
            continue
        value = float(metrics[rule.metric])
        limit = rule.limit(_first_value(run_id, rule.metric, before=step))
        if limit is None:
            continue  # a relative rule's first value: the baseline, nothing to compare yet
        open_alerts = Alert.objects.filter(run_id=run_id, metric=rule.metric, resolved_at=None)
        if not rule.breached(value, limit):
            open_alerts.update(resolved_at=now)
            continue
        if open_alerts.exists():
            continue
        try:
            with transaction.atomic():
                opened.append(
                    Alert.objects.create(
                        run_id=run_id,
                        metric=rule.metric,
                        value=value if math.isfinite(value) else 0.0,
                        threshold=limit,
                        direction=rule.direction,
                        step=step,
                        meaning=rule.meaning,
                        diagnosis=DIAGNOSIS[rule.diagnosis_step],
                    )
                )
        except IntegrityError:
            pass  # opened by a concurrent evaluation
    return opened


def _first_value(run_id: int, metric: str, *, before: int) -> float | None:
    """The run's value of ``metric`` at its earliest logged step before ``before``, or None."""
    return (
        MetricPoint.objects.filter(run_id=run_id, name=metric, step__lt=before)
        .order_by("step")
        .values_list("value", flat=True)
        .first()
    )

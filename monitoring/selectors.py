"""Reads for the monitoring pages: runs with their latest numbers, a run's metric series."""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings

from monitoring.models import Alert
from training.models import MetricPoint, TrainingRun

# Charts come in this order when the metric exists; others follow alphabetically.
PREFERRED = (
    "loss", "reward/score_mean", "reward/score_std", "reward/total_mean", "kl", "kl_coef",
    "clip_fraction", "entropy", "rewards/accuracy", "accuracy", "rewards/margin", "rewards/chosen",
    "rewards/rejected", "eval_reward_mean", "eval_reward_std",
    "response_length", "repetition_rate", "tokens_per_second", "memory_fraction", "learning_rate",
)  # fmt: skip


def runs_overview(*, limit: int = 100) -> list[dict[str, object]]:
    """Recent runs with their latest loss, reward and KL, and the open alert count."""
    runs = list(
        TrainingRun.objects.select_related("snapshot__export__project", "created_by")[:limit]
    )
    latest: dict[int, dict[str, float]] = defaultdict(dict)
    for run_id, name, value in (
        MetricPoint.objects.filter(run__in=runs, name__in=("loss", "reward/score_mean", "kl"))
        .order_by("run_id", "name", "step")
        .values_list("run_id", "name", "value")
    ):
        latest[run_id][name] = value  # ordered by step: the last one wins
    open_alerts: dict[int, int] = defaultdict(int)
    for run_id in Alert.objects.filter(run__in=runs, resolved_at=None).values_list(
        "run_id", flat=True
    ):
        open_alerts[run_id] += 1
    return [
        {"run": run, "latest": latest.get(run.pk, {}), "alerts": open_alerts.get(run.pk, 0)}
        for run in runs
    ]


def run_series(*, run: TrainingRun, after_step: int = -1) -> dict[str, list[list[float]]]:
    """{metric: [[step, value], ...]} for steps after ``after_step``, charts in preferred order."""
    series: dict[str, list[list[float]]] = defaultdict(list)
    for step, name, value in (
        MetricPoint.objects.filter(run=run, step__gt=after_step)
        .order_by("step")
        .values_list("step", "name", "value")
    ):
        series[name].append([step, value])
    order = {name: i for i, name in enumerate(PREFERRED)}
    return dict(sorted(series.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def alert_thresholds() -> dict[str, dict[str, object]]:
    """{metric: {threshold, direction, meaning}} to draw as lines on the charts."""
    return {
        rule["metric"]: {k: rule[k] for k in ("threshold", "direction", "meaning")}
        for rule in settings.CONCORD_ALERT_RULES
    }

"""Reads of human-eval rounds: a round's statistics for its results page, a run's stopping panel."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from annotation.agreement import krippendorff_alpha
from monitoring import stopping
from monitoring.models import EvalAssignment, EvalJudgement, EvalRound
from training.models import MetricPoint, TrainingRun

# Metric names whose per-evaluation mean reward the plateau is judged on (first one logged wins).
REWARD_METRICS = ("eval_reward_mean", "reward_mean")


def round_judgements(round_: EvalRound) -> list[EvalJudgement]:
    """The round's judgements in the order they arrived, with their item and reviewer."""
    return list(
        EvalJudgement.objects.filter(assignment__item__round=round_)
        .select_related("assignment__item", "assignment__reviewer")
        .order_by("created_at", "pk")
    )


def round_win_rate_over_time(round_: EvalRound) -> list[dict[str, float]]:
    """[{n, estimate, low, high}] after each rating, in arrival order (Wilson 95%)."""
    outcomes = [
        {"a": 1.0, "tie": 0.5, "b": 0.0}[preference]
        for preference in EvalJudgement.objects.filter(assignment__item__round=round_)
        .order_by("created_at", "pk")
        .values_list("preference", flat=True)
    ]
    return stopping.win_rate_over_time(outcomes)


def round_results(round_: EvalRound, *, n_boot: int = 1000) -> dict[str, Any]:
    """Everything the results page shows.

    Returns {n_judgements, win_rate (Interval), over_time [{n, estimate, low, high}], eprocess,
    usefulness (UsefulnessSummary), alpha (ordinal Krippendorff on usefulness, NaN when < 2 raters),
    length_controlled, length_ratio, repetition, items [{item, judgements, outcomes, disagree}]}.
    """
    judgements = round_judgements(round_)
    outcomes = np.array([j.outcome for j in judgements], dtype=float)
    ratings = np.array([j.usefulness for j in judgements], dtype=float)
    item_ids = np.array([j.assignment.item_id for j in judgements], dtype=int)
    items = list(round_.items.select_related("prompt").order_by("position"))
    by_item: dict[int, list[EvalJudgement]] = defaultdict(list)
    for j in judgements:
        by_item[j.assignment.item_id].append(j)

    reviewers = sorted({j.assignment.reviewer_id for j in judgements})
    alpha = float("nan")
    if len(reviewers) >= 2 and items:
        column = {item.pk: k for k, item in enumerate(items)}
        row = {r: k for k, r in enumerate(reviewers)}
        data = np.full((len(reviewers), len(items)), np.nan)
        for j in judgements:
            data[row[j.assignment.reviewer_id], column[j.assignment.item_id]] = j.usefulness
        try:
            alpha = krippendorff_alpha(data, level="ordinal")
        except (ValueError, ZeroDivisionError):
            alpha = float("nan")

    rated = [item for item in items if by_item.get(item.pk)]
    lc = stopping.length_controlled_win_rate(
        outcomes,
        [max(1, j.assignment.item.checkpoint_tokens) for j in judgements],
        [max(1, j.assignment.item.baseline_tokens) for j in judgements],
    )
    rows = []
    for item in items:
        mine = by_item.get(item.pk, [])
        prefs = {j.preference for j in mine}
        spread = max((j.usefulness for j in mine), default=0) - min(
            (j.usefulness for j in mine), default=0
        )
        rows.append(
            {
                "item": item,
                "judgements": mine,
                "disagree": len(prefs) > 1 or spread >= 2,
                "mean_usefulness": float(np.mean([j.usefulness for j in mine])) if mine else None,
            }
        )
    return {
        "n_judgements": len(judgements),
        "n_reviewers": len(reviewers),
        "win_rate": stopping.win_rate(outcomes),
        "over_time": stopping.win_rate_over_time(outcomes),
        "eprocess": stopping.win_rate_eprocess(outcomes),
        "usefulness": stopping.usefulness_summary(ratings, item_ids, n_boot=n_boot),
        "alpha": alpha,
        "length_controlled": lc,
        "repetition": float(
            np.mean([stopping.text_repetition_rate(i.checkpoint_text) for i in rated])
        )
        if rated
        else None,
        "items": rows,
        "disagreements": [r for r in rows if r["disagree"]],
    }


def _series(run: TrainingRun, name: str) -> list[float]:
    return list(
        MetricPoint.objects.filter(run=run, name=name)
        .order_by("step")
        .values_list("value", flat=True)
    )


def run_stopping_panel(run: TrainingRun, *, n_boot: int = 1000) -> dict[str, Any]:
    """The stopping panel of a run: criteria from its metric points and its latest round with
    ratings, the trend across its rounds, and its recorded decisions."""
    rewards: list[float] = []
    for name in REWARD_METRICS:
        rewards = _series(run, name)
        if rewards:
            break
    rounds = list(
        EvalRound.objects.filter(checkpoint__run=run)
        .select_related("checkpoint")
        .order_by("checkpoint__step", "created_at")
    )
    latest = None
    rated_rounds: list[EvalRound] = []
    round_rewards, round_win_rates = [], []
    for round_ in rounds:
        outcomes = [j.outcome for j in round_judgements(round_)]
        if not outcomes:
            continue
        latest = round_
        rated_rounds.append(round_)
        reward = round_.checkpoint.metrics.get("reward_mean")
        if reward is None:
            before = MetricPoint.objects.filter(
                run=run, name__in=REWARD_METRICS, step__lte=round_.checkpoint.step
            ).order_by("-step")
            reward = before.values_list("value", flat=True).first()
        round_rewards.append(float("nan") if reward is None else float(reward))
        round_win_rates.append(float(np.mean(outcomes)))
    usefulness, prompts, item_rewards, item_useful = [], [], [], []
    if latest is not None:
        per_item: dict[int, list[int]] = defaultdict(list)
        rewards_of: dict[int, float | None] = {}
        for j in round_judgements(latest):
            usefulness.append(j.usefulness)
            prompts.append(j.assignment.item_id)
            per_item[j.assignment.item_id].append(j.usefulness)
            rewards_of[j.assignment.item_id] = j.assignment.item.reward_score
        for item_id, values in per_item.items():
            if rewards_of[item_id] is not None:
                item_rewards.append(rewards_of[item_id])
                item_useful.append(float(np.mean(values)))
    cfg = stopping.StoppingConfig(kl_band=_kl_band(run))
    panel = stopping.stopping_panel(
        eval_rewards=rewards,
        kl_values=_series(run, "kl"),
        usefulness=usefulness,
        usefulness_prompt_ids=prompts,
        item_reward_scores=item_rewards,
        item_usefulness=item_useful,
        round_rewards=round_rewards,
        round_win_rates=round_win_rates,
        config=cfg,
        n_boot=n_boot,
    )
    best_checkpoint = None
    trend = panel.extras["trend"]
    if trend.best_round is not None:
        best_checkpoint = rated_rounds[trend.best_round].checkpoint
    length_ratio = repetition = None
    if latest is not None:
        rows = list(
            latest.items.values_list("checkpoint_tokens", "baseline_tokens", "checkpoint_text")
        )
        if rows:
            length_ratio = float(np.mean([max(c, 1) / max(b, 1) for c, b, _ in rows]))
            repetition = float(
                np.mean([stopping.text_repetition_rate(text) for _, _, text in rows])
            )
    return {
        "length_ratio": length_ratio,
        "repetition": repetition,
        "bradley_terry": run_bradley_terry(run, n_boot=min(n_boot, 300)),
        "panel": panel,
        "latest_round": latest,
        "rounds": rounds,
        "best_checkpoint": best_checkpoint,
        "decisions": list(run.stop_decisions.select_related("reviewer", "checkpoint")[:20]),
    }


def run_bradley_terry(run: TrainingRun, *, n_boot: int = 300) -> list[dict[str, Any]]:
    """Bradley-Terry scores of every model the run's rounds compared (its checkpoints and their
    baselines), anchored at the first baseline (score 0), with bootstrap intervals.

    Returns [{label, score, low, high}] ordered by score, best first; [] before any rating.
    """
    nodes: dict[tuple[str, object], int] = {}
    labels: list[str] = []

    def node(key: tuple[str, object], label: str) -> int:
        if key not in nodes:
            nodes[key] = len(labels)
            labels.append(label)
        return nodes[key]

    pairs: list[tuple[int, int, float]] = []
    rounds = EvalRound.objects.filter(checkpoint__run=run).select_related(
        "checkpoint", "baseline_checkpoint"
    )
    for round_ in rounds.order_by("created_at"):
        outcomes = [j.outcome for j in round_judgements(round_)]
        if not outcomes:
            continue
        if round_.baseline_checkpoint_id:
            base = node(
                ("ckpt", round_.baseline_checkpoint_id), f"step {round_.baseline_checkpoint.step}"
            )
        else:
            base = node(("model", round_.baseline_model), round_.baseline_model)
        mine = node(("ckpt", round_.checkpoint_id), f"step {round_.checkpoint.step}")
        pairs.extend((mine, base, outcome) for outcome in outcomes)
    if not pairs:
        return []
    fit = stopping.bradley_terry(pairs, len(labels), anchor=0, n_boot=n_boot)
    rows = [
        {"label": labels[k], "score": float(fit.scores[k]), "low": float(fit.low[k]),
         "high": float(fit.high[k])}
        for k in range(len(labels))
    ]  # fmt: skip
    return sorted(rows, key=lambda row: -row["score"])


def _kl_band(run: TrainingRun) -> tuple[float, float]:
    """The run's configured healthy KL band (config ``kl_band``), else PIPELINE.md's 0.12-0.22."""
    band = run.config.get("kl_band") if isinstance(run.config, dict) else None
    if isinstance(band, list | tuple) and len(band) == 2 and band[0] < band[1]:
        return float(band[0]), float(band[1])
    return (0.12, 0.22)


def rounds_open_for(reviewer_id: int) -> list[dict[str, Any]]:
    """Open rounds with how many items each still needs and how many this reviewer rated."""
    rows = []
    for round_ in EvalRound.objects.filter(status=EvalRound.Status.OPEN).select_related(
        "checkpoint__run"
    ):
        needed = round_.size * round_.reviewers_per_item
        done = EvalJudgement.objects.filter(assignment__item__round=round_).count()
        mine = EvalAssignment.objects.filter(
            item__round=round_, reviewer_id=reviewer_id, judgement__isnull=False
        ).count()
        rows.append({"round": round_, "needed": needed, "done": done, "mine": mine})
    return rows

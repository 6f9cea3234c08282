"""Reads for a run's "When to stop" panel: the stopping criteria from its metric points and its
latest rated eval round (human-only or prediction-powered estimates), the trend across its rounds,
the Bradley-Terry scores of what its rounds compared, and its recorded decisions. Beside the round
reads it combines (``monitoring.selectors.eval_rounds`` and ``round_judges``), so neither of those
imports the other's reader of them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from monitoring.models import EvalRound
from monitoring.selectors import round_judges as ppi_selectors
from monitoring.selectors.eval_rounds import round_judgements, round_outcomes
from monitoring.stats import stopping
from monitoring.stats.peak import PeakLine, peak_line
from training.models import MetricPoint, TrainingRun

# Metric names whose per-evaluation mean reward the plateau is judged on (first one logged wins).
REWARD_METRICS = ("eval_reward_mean", "reward_mean")
# A gold scorer's mean reward of the policy's held-out answers, logged beside the proxy's (the farm's
# gold reward model, or a team's own stand-in for people): gold points of the peak estimate.
GOLD_METRIC = "gold_reward_mean"


def _series(run: TrainingRun, name: str) -> list[float]:
    return list(
        MetricPoint.objects.filter(run=run, name=name)
        .order_by("step")
        .values_list("value", flat=True)
    )


def run_stopping_panel(
    run: TrainingRun, *, n_boot: int = 1000, kappa_threshold: float | None = None
) -> dict[str, Any]:
    """The stopping panel of a run: criteria from its metric points and its latest round with
    ratings, the trend across its rounds, and its recorded decisions.

    ``latest_round``: the latest round with a human rating. ``estimates``: its win rate and
    usefulness estimates, each human-only or
    prediction-powered by ``ppi.choose_estimate`` with ``kappa_threshold`` (the reviewer's bar for
    the round judge's kappa with the reviewers; None: ``ppi_selectors.DEFAULT_KAPPA_THRESHOLD``);
    the usefulness one decides the usefulness criterion. None before any rating."""
    if kappa_threshold is None:
        kappa_threshold = ppi_selectors.DEFAULT_KAPPA_THRESHOLD
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
    rated_items = 0
    rated_rounds: list[EvalRound] = []
    round_rewards, round_win_rates = [], []
    for round_ in rounds:
        # A round without a human rating has no human win rate (identical answers alone are none).
        counted = round_outcomes(round_)
        win_rate = counted.win_rate()
        if win_rate is None:
            continue
        latest, rated_items = round_, counted.n_rated_items
        rated_rounds.append(round_)
        reward = round_.checkpoint.metrics.get("reward_mean")
        if reward is None:
            before = MetricPoint.objects.filter(
                run=run, name__in=REWARD_METRICS, step__lte=round_.checkpoint.step
            ).order_by("-step")
            reward = before.values_list("value", flat=True).first()
        round_rewards.append(float("nan") if reward is None else float(reward))
        round_win_rates.append(win_rate.estimate)
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
    estimates = None
    if latest is not None:
        estimates = ppi_selectors.round_panel_estimates(
            latest, kappa_threshold=kappa_threshold, n_boot=n_boot
        )
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
        usefulness_choice=estimates["usefulness"] if estimates else None,
        finished=run.status in TrainingRun.FINISHED,
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
        "peak": run_peak_line(run, rated_rounds=rated_rounds, n_boot=n_boot),
        "panel": panel,
        "estimates": estimates,
        "kappa_threshold": kappa_threshold,
        "latest_round": latest,
        "n_rated_items": rated_items,
        "few_items": latest is not None and rated_items < stopping.MIN_RATED_ITEMS,
        "min_rated_items": stopping.MIN_RATED_ITEMS,
        "rounds": rounds,
        "best_checkpoint": best_checkpoint,
        "decisions": list(run.stop_decisions.select_related("reviewer", "checkpoint")[:20]),
    }


def _step_series(run: TrainingRun, name: str) -> dict[int, float]:
    return dict(
        MetricPoint.objects.filter(run=run, name=name).order_by("step").values_list("step", "value")
    )


def _kl_at(kl_by_step: dict[int, float], step: int) -> float | None:
    """The KL logged at ``step``, else the last one before it (None before any)."""
    before = [s for s in kl_by_step if s <= step]
    return kl_by_step[max(before)] if before else None


def _human_gold_points(
    rated_rounds: list[EvalRound], kl_by_step: dict[int, float]
) -> tuple[list[float], list[float]]:
    """(KL, reward) of each rated round's checkpoint with its mean usefulness put on the reward
    model's scale: a least-squares line reward_score ~ usefulness over the first rated round's
    items (the least optimised answers, before the proxy drifts from people), then each round's
    mean usefulness through it. ([], []) when the first round cannot calibrate (fewer than 3 scored
    items, or every item rated alike) or no round's checkpoint has a KL."""
    if not rated_rounds:
        return [], []
    pairs = _item_usefulness_and_scores(rated_rounds[0])
    if len(pairs) < 3 or len({u for u, _ in pairs}) < 2:
        return [], []
    slope, offset = np.polyfit([u for u, _ in pairs], [r for _, r in pairs], 1)
    kls, rewards = [], []
    for round_ in rated_rounds:
        kl = round_.checkpoint.metrics.get("kl", _kl_at(kl_by_step, round_.checkpoint.step))
        values = [j.usefulness for j in round_judgements(round_) if j.usefulness is not None]
        if kl is None or not values:
            continue
        kls.append(float(kl))
        rewards.append(float(offset + slope * np.mean(values)))
    return kls, rewards


def _item_usefulness_and_scores(round_: EvalRound) -> list[tuple[float, float]]:
    """(mean usefulness, reward-model score) of each rated item of ``round_`` that has a score."""
    per_item: dict[int, list[int]] = defaultdict(list)
    score_of: dict[int, float | None] = {}
    for j in round_judgements(round_):
        if j.usefulness is not None:
            per_item[j.assignment.item_id].append(j.usefulness)
            score_of[j.assignment.item_id] = j.assignment.item.reward_score
    return [
        (float(np.mean(values)), float(score_of[item]))
        for item, values in per_item.items()
        if score_of[item] is not None
    ]


def run_peak_line(
    run: TrainingRun, *, rated_rounds: list[EvalRound], n_boot: int = 1000
) -> PeakLine:
    """The panel's "estimated peak at KL x (interval), current KL y" (``peak.peak_line``): the
    run's evaluated proxy reward (``eval_reward_mean``) against the KL logged at the same step,
    corrected by gold points (a ``gold_reward_mean`` metric at evaluated steps, and the rated
    rounds' usefulness on the reward scale, ``_human_gold_points``), and the checkpoint nearest
    the estimate among the run's checkpoints (KL from its metrics or the metric points)."""
    # The logged KL is a sampled estimate (k1 can dip below zero near the reference); KL itself
    # is >= 0, and the curve's axis is sqrt(KL).
    kl_by_step = {step: max(value, 0.0) for step, value in _step_series(run, "kl").items()}
    proxy = _step_series(run, REWARD_METRICS[0])
    points = [(kl_by_step[s], r) for s, r in proxy.items() if s in kl_by_step]
    gold = [
        (kl_by_step[s], r) for s, r in _step_series(run, GOLD_METRIC).items() if s in kl_by_step
    ]
    human_kl, human_reward = _human_gold_points(rated_rounds, kl_by_step)
    checkpoint_kls = {}
    for checkpoint in run.checkpoints.all():
        kl = checkpoint.metrics.get("kl", _kl_at(kl_by_step, checkpoint.step))
        if kl is not None:
            checkpoint_kls[f"step {checkpoint.step}"] = float(kl)
    return peak_line(
        eval_kl=[k for k, _ in points],
        eval_reward=[r for _, r in points],
        gold_kl=[k for k, _ in gold] + human_kl,
        gold_reward=[r for _, r in gold] + human_reward,
        current_kl=kl_by_step[max(kl_by_step)] if kl_by_step else None,
        checkpoint_kls=checkpoint_kls,
        n_boot=max(n_boot, 100),
    )


def run_bradley_terry(run: TrainingRun, *, n_boot: int = 300) -> list[dict[str, Any]]:
    """Bradley-Terry scores of every model the run's rounds compared (its checkpoints and their
    baselines), anchored at the first baseline (score 0), with bootstrap intervals.

    One comparison per item (the mean of its outcomes, an identical item one tie), so the bootstrap
    resamples items. Returns [{label, score, low, high}] ordered by score, best first; [] before
    any human rating.
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
        counted = round_outcomes(round_)
        if not counted.n_ratings:
            continue
        if round_.baseline_checkpoint_id:
            base = node(
                ("ckpt", round_.baseline_checkpoint_id), f"step {round_.baseline_checkpoint.step}"
            )
        else:
            base = node(("model", round_.baseline_model), round_.baseline_model)
        mine = node(("ckpt", round_.checkpoint_id), f"step {round_.checkpoint.step}")
        # One comparison per item (its mean outcome): the bootstrap resamples items, not ratings.
        means = stopping.item_means(counted.outcomes, counted.item_ids)
        pairs.extend((mine, base, float(outcome)) for outcome in means)
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

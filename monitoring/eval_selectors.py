"""Reads of human-eval rounds: a round's statistics for its results page, a run's stopping panel."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from django.db.models import Count, Exists, OuterRef, QuerySet

from annotation.agreement import krippendorff_alpha
from monitoring import stopping
from monitoring.models import EvalAssignment, EvalItem, EvalJudgement, EvalRound
from training.models import MetricPoint, TrainingRun

# Metric names whose per-evaluation mean reward the plateau is judged on (first one logged wins).
REWARD_METRICS = ("eval_reward_mean", "reward_mean")


# Rounds whose answers have been generated: before that both answers of every item are empty.
GENERATED = (EvalRound.Status.OPEN, EvalRound.Status.CLOSED)
OUTCOME = {"a": 1.0, "tie": 0.5, "b": 0.0}


def answers_identical(first: str, second: str) -> bool:
    """Whether two answers say the same words: whitespace runs (spaces, tabs, newlines) count as
    one space and the ends are stripped, so "Paris.\n" and " Paris." are identical."""
    return first.split() == second.split()


def identical_item_ids(round_: EvalRound) -> set[int]:
    """The round's items whose two answers are identical (``answers_identical``): never shown to a
    reviewer, each counted as ties. None before the answers are generated."""
    if round_.status not in GENERATED:
        return set()
    rows = EvalItem.objects.filter(round=round_).values_list(
        "pk", "checkpoint_text", "baseline_text"
    )
    return {pk for pk, mine, theirs in rows if answers_identical(mine, theirs)}


def rateable_items(round_: EvalRound) -> QuerySet[EvalItem]:
    """The round's items a reviewer can judge: those drawn for reviewers (every item when the
    round has no judge) but those with identical answers."""
    return EvalItem.objects.filter(round=round_, for_humans=True).exclude(
        pk__in=identical_item_ids(round_)
    )


def human_identical_item_ids(round_: EvalRound) -> set[int]:
    """The items drawn for reviewers whose two answers are identical: the ties the human-only
    figures count (every identical item when the round has no judge)."""
    identical = identical_item_ids(round_)
    if not identical:
        return set()
    drawn = EvalItem.objects.filter(pk__in=identical, for_humans=True)
    return set(drawn.values_list("pk", flat=True))


def round_outcomes(round_: EvalRound) -> list[float]:
    """The round's outcomes from the checkpoint's side, [N] in {1, 0.5, 0}: first the ties of the
    items with identical answers, each item counted ``reviewers_per_item`` times (the weight a
    fully rated item has, so every item weighs the same), then every rating in arrival order.
    With a judge, only the identical items drawn for reviewers count: these are humans' figures."""
    ties = [0.5] * (len(human_identical_item_ids(round_)) * round_.reviewers_per_item)
    return ties + [
        OUTCOME[preference]
        for preference in EvalJudgement.objects.filter(assignment__item__round=round_)
        .order_by("created_at", "pk")
        .values_list("preference", flat=True)
    ]


def round_judgements(round_: EvalRound) -> list[EvalJudgement]:
    """The round's judgements in the order they arrived, with their item and reviewer."""
    return list(
        EvalJudgement.objects.filter(assignment__item__round=round_)
        .select_related("assignment__item", "assignment__reviewer")
        .order_by("created_at", "pk")
    )


def round_win_rate_over_time(round_: EvalRound) -> list[dict[str, float]]:
    """[{n, estimate, low, high}] after each outcome of ``round_outcomes`` (the identical items'
    ties first, then the ratings in arrival order; Wilson 95%)."""
    return stopping.win_rate_over_time(round_outcomes(round_))


def round_results(round_: EvalRound, *, n_boot: int = 1000) -> dict[str, Any]:
    """Everything the results page shows.

    Returns {n_judgements, n_reviewers, n_identical (items with identical answers), n_ties (the
    ties they add: n_identical x reviewers_per_item, as in ``round_outcomes``), win_rate (Interval
    over the ties and the ratings), over_time [{n, estimate, low, high}] (the same, ties first),
    eprocess (on the ratings alone: a tie moves no wealth), usefulness (UsefulnessSummary, ratings
    only), alpha (ordinal Krippendorff on usefulness, NaN when < 2 raters), length_controlled,
    repetition, items [{item, judgements, identical, disagree, mean_usefulness}], disagreements}.
    """
    judgements = round_judgements(round_)
    identical = human_identical_item_ids(round_)
    items = list(round_.items.select_related("prompt").order_by("position"))
    tied = [
        item for item in items if item.pk in identical for _ in range(round_.reviewers_per_item)
    ]
    rated_outcomes = [j.outcome for j in judgements]
    outcomes = np.array([0.5] * len(tied) + rated_outcomes, dtype=float)
    ratings = np.array([j.usefulness for j in judgements], dtype=float)
    item_ids = np.array([j.assignment.item_id for j in judgements], dtype=int)
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

    counted = [item for item in items if by_item.get(item.pk) or item.pk in identical]
    outcome_items = tied + [j.assignment.item for j in judgements]
    lc = stopping.length_controlled_win_rate(
        outcomes,
        [max(1, item.checkpoint_tokens) for item in outcome_items],
        [max(1, item.baseline_tokens) for item in outcome_items],
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
                "identical": item.pk in identical,
                "disagree": len(prefs) > 1 or spread >= 2,
                "mean_usefulness": float(np.mean([j.usefulness for j in mine])) if mine else None,
            }
        )
    return {
        "n_judgements": len(judgements),
        "n_reviewers": len(reviewers),
        "n_identical": len(identical),
        "n_ties": len(tied),
        "win_rate": stopping.win_rate(outcomes),
        "over_time": stopping.win_rate_over_time(outcomes),
        "eprocess": stopping.win_rate_eprocess(rated_outcomes),
        "usefulness": stopping.usefulness_summary(ratings, item_ids, n_boot=n_boot),
        "alpha": alpha,
        "length_controlled": lc,
        "repetition": float(
            np.mean([stopping.text_repetition_rate(i.checkpoint_text) for i in counted])
        )
        if counted
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


def run_stopping_panel(
    run: TrainingRun, *, n_boot: int = 1000, kappa_threshold: float | None = None
) -> dict[str, Any]:
    """The stopping panel of a run: criteria from its metric points and its latest round with
    ratings, the trend across its rounds, and its recorded decisions.

    ``estimates``: the latest round's win rate and usefulness estimates, each human-only or
    prediction-powered by ``ppi.choose_estimate`` with ``kappa_threshold`` (the reviewer's bar for
    the round judge's kappa with the reviewers; None: ``ppi_selectors.DEFAULT_KAPPA_THRESHOLD``);
    the usefulness one decides the usefulness criterion. None before any rating."""
    # ppi_selectors reads this module's helpers, so it is imported here, not at the top.
    from monitoring import ppi_selectors

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
    rated_rounds: list[EvalRound] = []
    round_rewards, round_win_rates = [], []
    for round_ in rounds:
        outcomes = round_outcomes(round_)
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
        "estimates": estimates,
        "kappa_threshold": kappa_threshold,
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
        outcomes = round_outcomes(round_)
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


def items_left_for(
    round_: EvalRound, reviewer_id: int, *, rateable: QuerySet[EvalItem] | None = None
) -> int:
    """Rateable items of the round this reviewer has not rated that still lack ratings (an upper
    bound on what they will be handed: other reviewers may take the last slots first).
    ``rateable``: the round's ``rateable_items`` when the caller has them already."""
    rated_by_me = EvalJudgement.objects.filter(
        assignment__item=OuterRef("pk"), assignment__reviewer_id=reviewer_id
    )
    items = rateable_items(round_) if rateable is None else rateable
    return (
        items.annotate(rated=Count("assignments__judgement"), mine=Exists(rated_by_me))
        .filter(rated__lt=round_.reviewers_per_item, mine=False)
        .count()
    )


def rounds_open_for(reviewer_id: int) -> list[dict[str, Any]]:
    """Open rounds with their progress for this reviewer: [{round, needed (ratings the rateable
    items need in all), done (ratings so far), mine (this reviewer's ratings), left (rateable items
    this reviewer has not rated that still lack ratings), identical (items drawn for reviewers but
    not shown: identical answers), judge_only (items only the round's judge rates)}]."""
    rows = []
    for round_ in EvalRound.objects.filter(status=EvalRound.Status.OPEN).select_related(
        "checkpoint__run"
    ):
        rateable = rateable_items(round_)
        n_rateable = rateable.count()
        n_drawn = round_.items.filter(for_humans=True).count()
        left = items_left_for(round_, reviewer_id, rateable=rateable)
        done = EvalJudgement.objects.filter(assignment__item__round=round_).count()
        mine = EvalAssignment.objects.filter(
            item__round=round_, reviewer_id=reviewer_id, judgement__isnull=False
        ).count()
        rows.append(
            {
                "round": round_,
                "needed": n_rateable * round_.reviewers_per_item,
                "done": done,
                "mine": mine,
                "left": left,
                "identical": n_drawn - n_rateable,
                "judge_only": round_.size - n_drawn,
            }
        )
    return rows

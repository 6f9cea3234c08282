"""Reads for a run's "When to stop" panel: the stopping criteria from its metric points and its
latest rated eval round (human-only or prediction-powered estimates), the trend across its rounds,
the Bradley-Terry scores of what its rounds compared, and its recorded decisions. Beside the round
reads it combines (``monitoring.selectors.eval_rounds`` and ``round_judges``), so neither of those
imports the other's reader of them.

Two halves, so a page view runs no bootstrap and a bounded number of queries:
- ``stopping_panel_figures(run)``: the heavy half (a query or two per round, the usefulness
  bootstrap and the Bradley-Terry bootstrap) as one JSON-ready dict. A Celery task computes it when
  ratings, verdicts, rounds or metrics change (``monitoring.services.stopping_panel``) and stores it
  in ``StoppingPanelFigures``, with ``stopping_panel_fingerprint`` of what it was computed from.
- ``stopping_panel_from_figures(run, figures, kappa_threshold=...)``: the light half (the estimate
  choice for the reviewer's kappa threshold, the criteria, the advice): no bootstrap, and two
  queries whatever the number of rounds (the rounds list and the decisions).
``run_stopping_panel`` puts both together (a fresh panel: scripts and tests).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from typing import Any

import numpy as np
from django.db.models import Count, Max, Sum

from monitoring.models import EvalJudgement, EvalJudgeVerdict, EvalRound, StoppingPanelFigures
from monitoring.selectors import round_judges as ppi_selectors
from monitoring.selectors.eval_rounds import round_judgements, round_outcomes
from monitoring.stats import stopping, win_rates
from monitoring.stats.intervals import Interval
from monitoring.stats.peak import PeakLine, peak_line
from monitoring.stats.ppi import PPIEstimate
from training.models import Checkpoint, MetricPoint, TrainingRun

# Metric names whose per-evaluation mean reward the plateau is judged on (first one logged wins).
REWARD_METRICS = ("eval_reward_mean", "reward_mean")
# A gold scorer's mean reward of the policy's held-out answers, logged beside the proxy's (the farm's
# gold reward model, or a team's own stand-in for people): gold points of the peak estimate.
GOLD_METRIC = "gold_reward_mean"
# The policy's KL from its reference measured at each evaluation (training.recipes.eval_kl): the
# peak line's axis when the run logs it, the training batch's "kl" otherwise.
KL_METRIC = "eval_kl"
# The stored figures' layout; a change of it (or of what they are computed from) bumps it, so older
# rows read as stale and are recomputed.
# 2: the peak's status peak / not_determined with a reason; each rated round's correlation.
# 3: each rated round's win rate against the run's base model (round_base_win_rates).
FIGURES_VERSION = 3
PANEL_BOOTSTRAP = 1000  # resamples of the usefulness interval; Bradley-Terry takes at most 300
# Only the last values of the series decide their criteria (``stopping.reward_plateau`` and
# ``kl_stability`` read the last ``window``): the stored figures keep these tails.
_CONFIG = stopping.StoppingConfig()


def _series(run: TrainingRun, name: str) -> list[float]:
    return list(
        MetricPoint.objects.filter(run=run, name=name)
        .order_by("step")
        .values_list("value", flat=True)
    )


# --- JSON: NaN is not JSON (PostgreSQL's jsonb refuses it): None stands for it ---------------------


def _out(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _in(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _interval_out(interval: Interval) -> dict[str, Any]:
    return {
        "estimate": _out(interval.estimate),
        "low": _out(interval.low),
        "high": _out(interval.high),
        "n": interval.n,
    }


def _interval_in(data: dict[str, Any]) -> Interval:
    return Interval(_in(data["estimate"]), _in(data["low"]), _in(data["high"]), int(data["n"]))


def _ppi_out(estimate: PPIEstimate | None) -> dict[str, Any] | None:
    if estimate is None:
        return None
    return {
        "ppi": _interval_out(estimate.ppi),
        "classical": _interval_out(estimate.classical),
        "lam": estimate.lam,
        "effective_n": estimate.effective_n,
        "n_items": estimate.n_items,
        "std_error": estimate.std_error,
        "classical_std_error": estimate.classical_std_error,
    }


def _ppi_in(data: dict[str, Any] | None) -> PPIEstimate | None:
    if data is None:
        return None
    return PPIEstimate(
        ppi=_interval_in(data["ppi"]),
        classical=_interval_in(data["classical"]),
        lam=float(data["lam"]),
        effective_n=float(data["effective_n"]),
        n_items=int(data["n_items"]),
        std_error=float(data["std_error"]),
        classical_std_error=float(data["classical_std_error"]),
    )


def _agreement_out(agreement: dict[str, Any] | None) -> dict[str, Any] | None:
    if agreement is None:
        return None
    return {**agreement, "kappa": _out(agreement["kappa"])}


def _agreement_in(agreement: dict[str, Any] | None) -> dict[str, Any] | None:
    if agreement is None:
        return None
    return {**agreement, "kappa": _in(agreement["kappa"])}


# --- The heavy half: computed by the task, stored ---------------------------------------------------


def stopping_panel_figures(run: TrainingRun, *, n_boot: int = PANEL_BOOTSTRAP) -> dict[str, Any]:
    """Everything of the run's panel that reads rounds or resamples, as a JSON-ready dict (NaN
    stored as None): the reward and KL tails, the latest rated round's ratings, per-item rewards and
    usefulness, its human-only win rate, its usefulness bootstrap (``n_boot`` resamples) and its
    judge's prediction-powered estimates and agreement; per rated round the proxy reward, the
    human win rate and the reward-vs-usefulness correlation; the Bradley-Terry scores
    (``min(n_boot, 300)`` resamples); the answers' length ratio and repetition. Independent of
    the reviewer's kappa threshold and of the run's status (``stopping_panel_from_figures``
    applies those)."""
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
    latest, latest_win_rate = None, None
    rated_items = 0
    rated_rounds: list[EvalRound] = []
    round_rewards, round_win_rates, round_correlations = [], [], []
    round_base_win_rates: list[dict[str, Any] | None] = []
    for round_ in rounds:
        # A round without a human rating has no human win rate (identical answers alone are none).
        counted = round_outcomes(round_)
        win_rate = counted.win_rate()
        if win_rate is None:
            continue
        latest, latest_win_rate, rated_items = round_, win_rate, counted.n_rated_items
        rated_rounds.append(round_)
        reward = round_.checkpoint.metrics.get("reward_mean")
        if reward is None:
            before = MetricPoint.objects.filter(
                run=run, name__in=REWARD_METRICS, step__lte=round_.checkpoint.step
            ).order_by("-step")
            reward = before.values_list("value", flat=True).first()
        round_rewards.append(float("nan") if reward is None else float(reward))
        round_win_rates.append(win_rate.estimate)
        against_base = (
            round_.baseline_checkpoint_id is None and round_.baseline_model == run.base_model
        )
        round_base_win_rates.append(_interval_out(win_rate) if against_base else None)
        round_correlations.append(_round_correlation(round_))
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
    # The one usefulness bootstrap: the human-only interval of the estimates and the panel's.
    summary = stopping.usefulness_summary(
        np.asarray(usefulness, dtype=float),
        np.asarray(prompts, dtype=int),
        confidence=_CONFIG.confidence,
        n_boot=n_boot,
    )
    ppi = agreement = None
    if latest is not None and latest.judge_id is not None:
        ppi = ppi_selectors.round_ppi(latest)
        agreement = ppi_selectors.round_judge_agreement(latest)
    trend = stopping.hacking_trend(round_rewards, round_win_rates)
    best = rated_rounds[trend.best_round].checkpoint if trend.best_round is not None else None
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
        "version": FIGURES_VERSION,
        "n_boot": n_boot,
        "eval_rewards": [_out(r) for r in rewards[-_CONFIG.plateau_window :]],
        "kl_values": [_out(k) for k in _series(run, "kl")[-_CONFIG.kl_window :]],
        "kl_band": list(_kl_band(run)),
        "usefulness": [float(u) for u in usefulness],
        "usefulness_prompt_ids": prompts,
        "usefulness_summary": {
            "mean": _interval_out(summary.mean),
            "share_low": _out(summary.share_low),
            "n_prompts": summary.n_prompts,
        },
        "item_reward_scores": [float(r) for r in item_rewards],
        "item_usefulness": item_useful,
        "round_rewards": [_out(r) for r in round_rewards],
        "round_win_rates": [_out(w) for w in round_win_rates],
        "round_correlations": [_out(c) for c in round_correlations],
        "round_base_win_rates": round_base_win_rates,
        "latest_round": latest.pk if latest is not None else None,
        "n_rated_items": rated_items,
        "win_rate": None if latest_win_rate is None else _interval_out(latest_win_rate),
        "ppi": None
        if ppi is None
        else {
            **ppi,
            "win_rate": _ppi_out(ppi["win_rate"]),
            "usefulness": _ppi_out(ppi["usefulness"]),
        },
        "agreement": _agreement_out(agreement),
        "best_checkpoint": None if best is None else {"id": best.pk, "step": best.step},
        "length_ratio": length_ratio,
        "repetition": repetition,
        "bradley_terry": run_bradley_terry(run, n_boot=min(n_boot, 300)),
        "peak": _peak_out(run_peak_line(run, rated_rounds=rated_rounds, n_boot=n_boot)),
    }


def stopping_panel_fingerprint(run: TrainingRun) -> str:
    """What the run's figures are computed from, in four aggregate queries whatever the number of
    rounds: its reward and KL metric points (count, last id, sum: a resumed run's replaced value
    changes the sum), its checkpoints (their stored reward), its rounds (status, judge, items'
    answers), the reviewers' ratings and the round judges' verdicts, the configured KL band and
    ``FIGURES_VERSION``. Two equal fingerprints: the figures would come out the same."""
    metrics = MetricPoint.objects.filter(
        run=run, name__in=(*REWARD_METRICS, "kl", KL_METRIC, GOLD_METRIC)
    ).aggregate(n=Count("pk"), last=Max("pk"), total=Sum("value"))
    checkpoints = Checkpoint.objects.filter(run=run).aggregate(n=Count("pk"), last=Max("pk"))
    rounds = list(
        EvalRound.objects.filter(checkpoint__run=run)
        .order_by("pk")
        .values_list("pk", "status", "judge_id", "judge_done", "answers_done")
    )
    ratings = EvalJudgement.objects.filter(assignment__item__round__checkpoint__run=run).aggregate(
        n=Count("pk"), last=Max("pk")
    )
    verdicts = EvalJudgeVerdict.objects.filter(item__round__checkpoint__run=run).aggregate(
        n=Count("pk"), last=Max("pk")
    )
    state = [FIGURES_VERSION, metrics, checkpoints, rounds, ratings, verdicts, _kl_band(run)]
    return hashlib.sha256(json.dumps(state, default=str).encode()).hexdigest()


def stored_stopping_panel(run: TrainingRun) -> StoppingPanelFigures | None:
    """The run's stored figures (None before the task first ran)."""
    return StoppingPanelFigures.objects.filter(run=run).first()


# --- The light half: at every page view --------------------------------------------------------------


def stopping_panel_from_figures(
    run: TrainingRun, figures: dict[str, Any] | None, *, kappa_threshold: float | None = None
) -> dict[str, Any]:
    """The panel the run page shows, from ``stopping_panel_figures`` (fresh or stored): the
    estimates chosen for ``kappa_threshold`` (None: ``ppi_selectors.DEFAULT_KAPPA_THRESHOLD``; the
    bar for the round judge's kappa with the reviewers from which the prediction-powered estimate
    is used), the criteria and advice (finished runs get advice on which checkpoint to keep), the
    run's rounds and its last 20 decisions. No bootstrap; two queries.

    ``latest_round``: the latest round with a human rating. ``estimates``: its win rate and
    usefulness estimates (``ppi_selectors.estimates_choose``); the usefulness one decides the
    usefulness criterion. None before any rating. figures None (not computed yet): panel None,
    with the rounds, the decisions and the threshold."""
    if kappa_threshold is None:
        kappa_threshold = ppi_selectors.DEFAULT_KAPPA_THRESHOLD
    rounds = list(
        EvalRound.objects.filter(checkpoint__run=run)
        .select_related("checkpoint")
        .order_by("checkpoint__step", "created_at")
    )
    decisions = list(run.stop_decisions.select_related("reviewer", "checkpoint")[:20])
    if figures is None:
        return {
            "panel": None, "estimates": None, "latest_round": None, "few_items": False, "peak": None,
            "bradley_terry": [], "best_checkpoint": None, "length_ratio": None,
            "kappa_threshold": kappa_threshold, "rounds": rounds, "decisions": decisions,
        }  # fmt: skip
    latest = next((r for r in rounds if r.pk == figures["latest_round"]), None)
    stored = figures["usefulness_summary"]
    summary = stopping.UsefulnessSummary(
        _interval_in(stored["mean"]), _in(stored["share_low"]), int(stored["n_prompts"])
    )
    estimates = None
    if figures["win_rate"] is not None:
        ppi = figures["ppi"]
        if ppi is not None:
            ppi = {**ppi, "win_rate": _ppi_in(ppi["win_rate"]),
                   "usefulness": _ppi_in(ppi["usefulness"])}  # fmt: skip
        estimates = ppi_selectors.estimates_choose(
            win_rate=_interval_in(figures["win_rate"]),
            usefulness=summary.mean,
            ppi=ppi,
            agreement=_agreement_in(figures["agreement"]),
            kappa_threshold=kappa_threshold,
        )
    panel = stopping.stopping_panel(
        eval_rewards=[_in(r) for r in figures["eval_rewards"]],
        kl_values=[_in(k) for k in figures["kl_values"]],
        usefulness=figures["usefulness"],
        usefulness_prompt_ids=figures["usefulness_prompt_ids"],
        item_reward_scores=figures["item_reward_scores"],
        item_usefulness=figures["item_usefulness"],
        round_rewards=[_in(r) for r in figures["round_rewards"]],
        round_win_rates=[_in(w) for w in figures["round_win_rates"]],
        round_correlations=[_in(c) for c in figures["round_correlations"]],
        round_base_win_rates=[
            None if w is None else _interval_in(w) for w in figures.get("round_base_win_rates", [])
        ],
        config=stopping.StoppingConfig(kl_band=tuple(figures["kl_band"])),
        n_boot=figures["n_boot"],
        usefulness_choice=estimates["usefulness"] if estimates else None,
        finished=run.status in TrainingRun.FINISHED,
        summary=summary,
    )
    rated_items = figures["n_rated_items"]
    return {
        "length_ratio": figures["length_ratio"],
        "repetition": figures["repetition"],
        "bradley_terry": figures["bradley_terry"],
        "peak": figures.get("peak"),
        "panel": panel,
        "estimates": estimates,
        "kappa_threshold": kappa_threshold,
        "latest_round": latest,
        "n_rated_items": rated_items,
        "few_items": latest is not None and rated_items < win_rates.MIN_RATED_ITEMS,
        "min_rated_items": win_rates.MIN_RATED_ITEMS,
        "rounds": rounds,
        "best_checkpoint": figures["best_checkpoint"],
        "decisions": decisions,
    }


def run_stopping_panel(
    run: TrainingRun, *, n_boot: int = PANEL_BOOTSTRAP, kappa_threshold: float | None = None
) -> dict[str, Any]:
    """The run's panel computed now (``stopping_panel_figures`` then
    ``stopping_panel_from_figures``): what the stored figures give once the task has run."""
    return stopping_panel_from_figures(
        run, stopping_panel_figures(run, n_boot=n_boot), kappa_threshold=kappa_threshold
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
        means = win_rates.item_means(counted.outcomes, counted.item_ids)
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


def _step_series(run: TrainingRun, name: str) -> dict[int, float]:
    return dict(
        MetricPoint.objects.filter(run=run, name=name).order_by("step").values_list("step", "value")
    )


def _checkpoint_kl(
    checkpoint: Checkpoint, kl_by_step: dict[int, float], *, name: str = "kl"
) -> float | None:
    """The KL (nats) at ``checkpoint``: its own metrics' ``name`` (``kl`` or ``eval_kl``), else
    the last logged at or before its step. A sampled estimate can dip below zero near the
    reference (and a recipe can store NaN when a step had no samples): KL itself is >= 0, so it is
    clamped, and a non-finite one is unknown (None)."""
    kl = checkpoint.metrics.get(name, _kl_at(kl_by_step, checkpoint.step))
    if kl is None or not math.isfinite(float(kl)):
        return None
    return max(float(kl), 0.0)


def _kl_at(kl_by_step: dict[int, float], step: int) -> float | None:
    """The KL logged at ``step``, else the last one before it (None before any)."""
    before = [s for s in kl_by_step if s <= step]
    return kl_by_step[max(before)] if before else None


def _human_gold_points(
    rated_rounds: list[EvalRound], kl_by_step: dict[int, float], *, kl_name: str = "kl"
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
        kl = _checkpoint_kl(round_.checkpoint, kl_by_step, name=kl_name)
        values = [j.usefulness for j in round_judgements(round_) if j.usefulness is not None]
        if kl is None or not values:
            continue
        kls.append(float(kl))
        rewards.append(float(offset + slope * np.mean(values)))
    return kls, rewards


def _round_correlation(round_: EvalRound) -> float:
    """Spearman rho of the reward model's score against the mean usefulness over ``round_``'s
    scored items (NaN when undefined): the hacking alarm watches its fall across rounds."""
    pairs = _item_usefulness_and_scores(round_)
    return stopping.reward_human_correlation([r for _, r in pairs], [u for u, _ in pairs]).rho


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
    # is >= 0, and the curve's axis is sqrt(KL). The evaluation KL (eval_kl: the held-out
    # prompts, the same seeded draws each time) is read when the run logs it; the training
    # batch's kl jumps from step to step with small batches.
    kl_name = KL_METRIC if _step_series(run, KL_METRIC) else "kl"
    kl_by_step = {
        step: max(value, 0.0)
        for step, value in _step_series(run, kl_name).items()
        if math.isfinite(value)
    }
    proxy = _step_series(run, REWARD_METRICS[0])
    points = [(kl_by_step[s], r) for s, r in proxy.items() if s in kl_by_step]
    gold = [
        (kl_by_step[s], r) for s, r in _step_series(run, GOLD_METRIC).items() if s in kl_by_step
    ]
    human_kl, human_reward = _human_gold_points(rated_rounds, kl_by_step, kl_name=kl_name)
    checkpoint_kls = {}
    for checkpoint in run.checkpoints.all():
        kl = _checkpoint_kl(checkpoint, kl_by_step, name=kl_name)
        if kl is not None:
            checkpoint_kls[f"step {checkpoint.step}"] = kl
    return peak_line(
        eval_kl=[k for k, _ in points],
        eval_reward=[r for _, r in points],
        gold_kl=[k for k, _ in gold] + human_kl,
        gold_reward=[r for _, r in gold] + human_reward,
        current_kl=kl_by_step[max(kl_by_step)] if kl_by_step else None,
        checkpoint_kls=checkpoint_kls,
        n_boot=max(n_boot, 100),
    )


def _peak_out(line: PeakLine) -> dict[str, Any]:
    """The peak line as stored: the sentence, the checkpoint nearest the peak ("step N"; None when
    the peak is not determined), the current KL (nats), the estimate's status (``peak`` or
    ``not_determined``) and its reason (None when determined)."""
    return {
        "text": line.text,
        "checkpoint": line.checkpoint,
        "current_kl": line.current_kl,
        "status": line.estimate.status,
        "reason": line.estimate.reason,
    }

"""Statistics that decide when training stops: pure NumPy/SciPy, no Django (PIPELINE.md "When to stop").

Human-eval rounds compare a checkpoint with a baseline. Every pairwise judgement is an *outcome* from
the checkpoint's side: 1 win, 0.5 tie, 0 loss. Every usefulness rating is 1-5 on the checkpoint's
response.

- The win rate and its intervals (``wilson_interval``, ``win_rate``, ``win_rate_eprocess``,
  ``sample_size_for_width``) live in ``monitoring.stats.win_rates``.
- ``usefulness_summary``: mean usefulness with a bootstrap interval clustered by prompt, and the share
  of ratings at or below 2.
- ``bradley_terry``: strengths of several checkpoints from pairwise outcomes, bootstrap intervals.
- ``length_controlled_win_rate``: the win rate at equal length (logistic regression on the length ratio).
- ``reward_human_correlation``, ``reward_plateau``, ``kl_stability``, ``hacking_trend``: the training
  side of the panel; ``stopping_panel`` puts every criterion together with its value and pass/fail.

The PPI estimate that may replace the human-only interval lives in monitoring/stats/ppi.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit
from scipy.stats import spearmanr

from common.ngrams import repeated_ngram_share
from monitoring.stats.base_comparison import base_comparison, keep_base_advice
from monitoring.stats.correlation_fall import correlation_fall
from monitoring.stats.intervals import EstimateChoice, Interval
from monitoring.stats.win_rates import ArrayLike, outcomes_array, z_value

# --- Usefulness ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsefulnessSummary:
    """Mean 1-5 usefulness with a prompt-clustered bootstrap interval; share of ratings <= 2."""

    mean: Interval
    share_low: float
    n_prompts: int


def usefulness_summary(
    ratings: ArrayLike,
    prompt_ids: Sequence[int] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> UsefulnessSummary:
    """Mean usefulness and its percentile bootstrap interval, resampling prompts (with all their
    ratings) rather than ratings: the 3 ratings of one prompt are not independent.

    ratings: [N] in 1..5; prompt_ids: [N] the prompt each rating belongs to.
    """
    y = np.asarray(ratings, dtype=float).reshape(-1)
    groups = np.asarray(prompt_ids).reshape(-1)
    if y.shape != groups.shape:
        raise ValueError(f"ratings {y.shape} and prompt_ids {groups.shape} differ in length")
    if y.size == 0:
        return UsefulnessSummary(Interval(math.nan, math.nan, math.nan, 0), math.nan, 0)
    if y.min() < 1 or y.max() > 5:
        raise ValueError("usefulness ratings must be between 1 and 5")
    _, codes = np.unique(groups, return_inverse=True)
    sums = np.bincount(codes, weights=y)
    counts = np.bincount(codes).astype(float)
    g = sums.size
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, g, size=(n_boot, g))
    boot = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail])
    mean = Interval(float(y.mean()), float(low), float(high), int(y.size))
    return UsefulnessSummary(mean, float((y <= 2).mean()), g)


# --- Bradley-Terry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BradleyTerryResult:
    """Log-strengths of M models anchored at ``anchor`` (its score is 0): P(i beats j) =
    sigmoid(score_i - score_j). low/high: [M] percentile bootstrap interval over comparisons."""

    scores: np.ndarray
    low: np.ndarray
    high: np.ndarray
    anchor: int


def _bt_fit(wins: np.ndarray, *, prior: float, max_iter: int = 10_000, tol: float = 1e-10):
    """Minorise-maximise fit of Bradley-Terry (Hunter 2004): p_i <- W_i / sum_j n_ij / (p_i + p_j).

    wins: [M, M], wins[i, j] = times i beat j (a tie adds 0.5 to both). prior: virtual wins added to
    every ordered pair, which keeps the estimate finite when one model won every comparison.
    Returns log-strengths [M] with mean 0.
    """
    m = wins.shape[0]
    w = wins + prior * (1 - np.eye(m))
    n = w + w.T
    total = w.sum(axis=1)
    p = np.ones(m)
    for _ in range(max_iter):
        denom = (n / (p[:, None] + p[None, :])).sum(axis=1)
        new = np.where(denom > 0, total / np.where(denom > 0, denom, 1), p)
        new = np.maximum(new, 1e-12)  # a model that never won tends to 0: keep the logs finite
        new = new / np.exp(np.log(new).mean())
        if np.max(np.abs(new - p)) < tol:
            p = new
            break
        p = new
    return np.log(p) - np.log(p).mean()


def bradley_terry(
    pairs: Sequence[tuple[int, int, float]] | np.ndarray,
    n_models: int,
    *,
    anchor: int = 0,
    prior: float = 0.1,
    confidence: float = 0.95,
    n_boot: int = 500,
    seed: int = 0,
) -> BradleyTerryResult:
    """Bradley-Terry scores of ``n_models`` from pairwise outcomes.

    pairs: [K, 3] rows (i, j, outcome of i against j: 1 win, 0.5 tie, 0 loss). The interval
    resamples the K comparisons with replacement (percentile bootstrap); the anchor's interval is
    [0, 0] by construction.
    """
    rows = np.asarray(pairs, dtype=float).reshape(-1, 3)
    if not 0 <= anchor < n_models:
        raise ValueError(f"anchor must index one of the {n_models} models, got {anchor}")
    if rows.size and (rows[:, :2].min() < 0 or rows[:, :2].max() >= n_models):
        raise ValueError(f"model indices must be in [0, {n_models})")
    i = rows[:, 0].astype(int)
    j = rows[:, 1].astype(int)
    out = outcomes_array(rows[:, 2])

    def fit(weights: np.ndarray) -> np.ndarray:
        wins = np.zeros((n_models, n_models))
        np.add.at(wins, (i, j), weights * out)
        np.add.at(wins, (j, i), weights * (1 - out))
        scores = _bt_fit(wins, prior=prior)
        return scores - scores[anchor]

    scores = fit(np.ones(len(rows)))
    rng = np.random.default_rng(seed)
    boots = np.array(
        [fit(np.bincount(rng.integers(0, len(rows), len(rows)), minlength=len(rows)).astype(float))
         for _ in range(n_boot if len(rows) else 0)]
    )  # fmt: skip
    if not boots.size:
        return BradleyTerryResult(scores, scores.copy(), scores.copy(), anchor)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(boots, [tail, 100 - tail], axis=0)
    return BradleyTerryResult(scores, low, high, anchor)


# --- Length control --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthControlled:
    """intercept: log-odds of a win at equal length; slope: per doubling of the length ratio.
    win_rate = sigmoid(intercept), the win rate the checkpoint would have at the baseline's length."""

    win_rate: float
    intercept: float
    slope: float
    raw_win_rate: float
    mean_length_ratio: float


def length_controlled_win_rate(
    outcomes: ArrayLike,
    checkpoint_lengths: ArrayLike,
    baseline_lengths: ArrayLike,
    *,
    ridge: float = 1e-3,
) -> LengthControlled:
    """Fractional logistic regression outcome ~ sigmoid(a + b * log2(len_ckpt / len_base)) fitted by
    Newton's method (ties as 0.5 outcomes; a tiny ridge keeps separated data finite). Judges prefer
    longer answers; the intercept removes that: the win rate at equal length (as AlpacaEval 2's
    length-controlled win rate). outcomes, lengths: [N]; lengths in tokens (or characters), >= 1.
    """
    y = outcomes_array(outcomes)
    lc = np.maximum(np.asarray(checkpoint_lengths, dtype=float).reshape(-1), 1)
    lb = np.maximum(np.asarray(baseline_lengths, dtype=float).reshape(-1), 1)
    if not (y.shape == lc.shape == lb.shape):
        raise ValueError("outcomes and both length arrays must have the same length")
    if y.size == 0:
        return LengthControlled(math.nan, math.nan, math.nan, math.nan, math.nan)
    x = np.log2(lc / lb)
    # Equal length ratios everywhere leave nothing to control for: fit the intercept alone.
    design = np.column_stack([np.ones_like(x), x]) if np.ptp(x) > 0 else np.ones((x.size, 1))
    beta = np.zeros(design.shape[1])
    for _ in range(100):
        mu = expit(design @ beta)
        grad = design.T @ (y - mu) - ridge * beta
        hess = (design * (mu * (1 - mu))[:, None]).T @ design + ridge * np.eye(beta.size)
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return LengthControlled(
        float(expit(beta[0])), float(beta[0]), float(beta[1]) if beta.size > 1 else 0.0,
        float(y.mean()),
        float(np.mean(lc / lb)),
    )  # fmt: skip


def text_repetition_rate(text: str, *, n: int = 3) -> float:
    """Share of a text's word n-grams that repeat an earlier n-gram (0: none, -> 1: a loop); 0 for a
    text shorter than n words."""
    return repeated_ngram_share(text.split(), n=n) or 0.0


# --- Training-side criteria ------------------------------------------------------------------------


@dataclass(frozen=True)
class Correlation:
    """Spearman's rho between reward-model scores and human usefulness; alarm when rho < minimum."""

    rho: float
    n: int
    alarm: bool | None  # None: too few or constant values to tell


def reward_human_correlation(
    reward_scores: ArrayLike, usefulness: ArrayLike, *, minimum: float = 0.3
) -> Correlation:
    """PIPELINE.md: a correlation between human rating and reward under 0.3 means hacking has
    started. reward_scores, usefulness: [N], one pair per item (usefulness averaged over reviewers).
    ``alarm`` is that level read alone; the panel's hacking alarm reads a fall across rounds
    instead (``monitoring.stats.correlation_fall``: low from the start is calibration)."""
    r = np.asarray(reward_scores, dtype=float).reshape(-1)
    u = np.asarray(usefulness, dtype=float).reshape(-1)
    if r.shape != u.shape:
        raise ValueError("reward_scores and usefulness must have the same length")
    keep = ~(np.isnan(r) | np.isnan(u))
    r, u = r[keep], u[keep]
    if r.size < 3 or np.ptp(r) == 0 or np.ptp(u) == 0:
        return Correlation(math.nan, int(r.size), None)
    rho = float(spearmanr(r, u).statistic)
    return Correlation(rho, int(r.size), rho < minimum)


def reward_plateau(rewards: ArrayLike, *, window: int = 5, min_gain: float = 0.005):
    """Mean gain per evaluation over the last ``window`` evaluations: (r[-1] - r[-window]) /
    (window - 1). Returns (gain, plateaued); gain None (and plateaued False) with fewer values."""
    r = np.asarray(rewards, dtype=float).reshape(-1)
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    if r.size < window:
        return None, False
    gain = float((r[-1] - r[-window]) / (window - 1))
    return gain, gain < min_gain


def kl_stability(
    kl_values: ArrayLike,
    *,
    window: int = 10,
    max_std: float = 0.015,
    band: tuple[float, float] = (0.12, 0.22),
) -> tuple[float | None, float | None, bool]:
    """(mean, std, stable) of the last ``window`` KL values (population std); stable when the std is
    under ``max_std`` and the mean inside ``band``. Fewer than ``window`` values: (None, None, False)."""
    k = np.asarray(kl_values, dtype=float).reshape(-1)
    if k.size < window:
        return None, None, False
    last = k[-window:]
    mean, std = float(last.mean()), float(last.std())
    return mean, std, std < max_std and band[0] <= mean <= band[1]


@dataclass(frozen=True)
class HackingTrend:
    """Across the last rounds: the proxy reward's and the human win rate's least-squares slopes per
    round. red: reward rising while the win rate falls; best_round: index of the highest win rate
    (the roll-back advice)."""

    reward_slope: float | None
    win_rate_slope: float | None
    red: bool
    best_round: int | None


def hacking_trend(
    proxy_rewards: ArrayLike, win_rates: ArrayLike, *, window: int = 3
) -> HackingTrend:
    """The red alarm: proxy reward rising while the human win rate falls across rounds.

    proxy_rewards, win_rates: [R] one value per round in round order (R >= 2 to judge; only the
    last ``window`` rounds count).
    """
    r = np.asarray(proxy_rewards, dtype=float).reshape(-1)
    w = np.asarray(win_rates, dtype=float).reshape(-1)
    if r.shape != w.shape:
        raise ValueError("proxy_rewards and win_rates must have one value per round each")
    best = int(np.nanargmax(w)) if w.size and not np.isnan(w).all() else None
    r, w = r[-window:], w[-window:]
    keep = ~(np.isnan(r) | np.isnan(w))
    r, w = r[keep], w[keep]
    if r.size < 2:
        return HackingTrend(None, None, False, best)
    t = np.arange(r.size, dtype=float)
    reward_slope = float(np.polyfit(t, r, 1)[0])
    win_slope = float(np.polyfit(t, w, 1)[0])
    return HackingTrend(reward_slope, win_slope, reward_slope > 0 and win_slope < 0, best)


# --- The panel -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoppingConfig:
    """Thresholds of PIPELINE.md's stopping rule."""

    plateau_window: int = 5  # evaluations the reward gain is averaged over
    plateau_min_gain: float = 0.005  # mean reward gain per evaluation below which it has plateaued
    kl_window: int = 10  # last KL values whose spread is checked
    kl_max_std: float = 0.015  # KL std under which the policy's divergence is stable
    kl_band: tuple[float, float] = (0.12, 0.22)  # healthy range of the mean KL
    usefulness_min: float = 4.2  # mean 1-5 usefulness the checkpoint must reach
    reviewers_min: int = 3  # independent reviewers every item needs
    # Hacking alarm on Spearman's rho (reward vs usefulness): under correlation_min after a first
    # rated round above it, or a fall of correlation_drop from the first round's (correlation_fall)
    correlation_min: float = 0.3
    correlation_drop: float = 0.3
    confidence: float = 0.95  # level of every interval

    def __post_init__(self) -> None:
        if self.plateau_window < 2:
            raise ValueError(f"plateau_window must be >= 2, got {self.plateau_window}")
        if self.kl_window < 2:
            raise ValueError(f"kl_window must be >= 2, got {self.kl_window}")
        if not self.kl_band[0] < self.kl_band[1]:
            raise ValueError(f"kl_band must be (low, high) with low < high, got {self.kl_band}")
        if not 1 <= self.usefulness_min <= 5:
            raise ValueError(f"usefulness_min must be in [1, 5], got {self.usefulness_min}")
        if self.reviewers_min < 1:
            raise ValueError(f"reviewers_min must be >= 1, got {self.reviewers_min}")
        z_value(self.confidence)


@dataclass(frozen=True)
class Criterion:
    """One line of the panel. passed None: not enough data yet."""

    key: str
    label: str
    value: float | None
    passed: bool | None
    detail: str = ""


@dataclass(frozen=True)
class StoppingPanel:
    """The criteria, the red alarm, the advice, and whether that advice is to keep the base model
    (``keep_base``: the reviewer's "reject" decision)."""

    criteria: list[Criterion]
    red_alarm: bool
    advice: str
    extras: dict[str, object] = field(default_factory=dict)
    keep_base: bool = False

    @property
    def ready_to_stop(self) -> bool:
        return all(c.passed for c in self.criteria)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _advice(
    criteria: list[Criterion],
    trend: HackingTrend,
    *,
    finished: bool,
    keep_base: str | None,
) -> str:
    """The panel's one-sentence recommendation. A finished run cannot be trained on: its advice is
    which checkpoint to keep (the final one, a roll back, or none: the base model when no rated
    checkpoint beats it). ``keep_base``: ``keep_base_advice``'s sentence, or None; it comes first,
    as rolling back to the best of checkpoints that all lose to the base would still ship a worse
    model."""
    if keep_base is not None:
        return keep_base
    best = (
        f"the checkpoint of round {trend.best_round + 1} (the best human win rate)"
        if trend.best_round is not None
        else "an earlier checkpoint"
    )
    if trend.red:
        return (
            "Red alarm: the proxy reward rises while the human win rate falls. Roll back to "
            f"{best} and fix the reward model before "
            + ("training again." if finished else "training on.")
        )
    if all(c.passed for c in criteria):
        if finished:
            return "Every criterion passes: keep the final checkpoint as the run's result."
        return "Every criterion passes: stop training and keep this checkpoint."
    plateau_unsatisfied = criteria[0].passed and criteria[1].passed is False
    if finished:
        if plateau_unsatisfied:
            return (
                "The run has ended; its reward plateaued but humans are not satisfied (the reward "
                f"signal is biased): roll back to {best}, or keep the final checkpoint only if "
                "a new round with human eval says it is good enough."
            )
        return (
            "The run has ended before every criterion passed: keep the final checkpoint, or roll "
            f"back to {best}; a human-eval round on the final checkpoint tells which."
        )
    if plateau_unsatisfied:
        return (
            "The reward has plateaued but humans are not satisfied: the reward signal is biased. "
            "Continue only with human eval in the loop."
        )
    return "Continue training; evaluate again at the next checkpoint."


def stopping_panel(
    *,
    eval_rewards: ArrayLike = (),
    kl_values: ArrayLike = (),
    usefulness: ArrayLike = (),
    usefulness_prompt_ids: Sequence[int] | np.ndarray = (),
    item_reward_scores: ArrayLike = (),
    item_usefulness: ArrayLike = (),
    round_rewards: ArrayLike = (),
    round_win_rates: ArrayLike = (),
    round_correlations: Sequence[float | None] = (),
    round_base_win_rates: Sequence[Interval | None] = (),
    config: StoppingConfig | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    usefulness_choice: EstimateChoice | None = None,
    finished: bool = False,
    summary: UsefulnessSummary | None = None,
) -> StoppingPanel:
    """Every stopping criterion with its value and pass/fail (all must pass to stop).

    eval_rewards: [E] mean reward of each evaluation, in order; kl_values: [T] logged KL values.
    usefulness, usefulness_prompt_ids: [N] ratings of the latest round and the prompt of each.
    item_reward_scores, item_usefulness: [I] per item of the latest round (mean usefulness per item).
    round_rewards, round_win_rates: [R] proxy reward and human win rate of each round, in order.
    round_base_win_rates: [R] per rated round, the win rate with its interval when the round's
    baseline is the run's base model, else None (``base_comparison``: when no rated checkpoint
    beats the base, the advice says to keep the base model).
    round_correlations: [R] Spearman rho of reward vs usefulness of each rated round, in order
    (None when undefined); the latest is replaced by the one from ``item_reward_scores``. The
    hacking alarm fires on a fall from the first (``correlation_fall``); empty: the latest round is
    its own reference, so the correlation alone raises no alarm.
    usefulness_choice: the latest round's usefulness estimate chosen by ``ppi.choose_estimate``
    (human-only or prediction-powered); its interval decides the usefulness criterion, whose
    detail names it. None: the bootstrap mean of ``usefulness``.
    finished: the run has ended, so the advice is which checkpoint to keep, never to train on.
    summary: ``usefulness_summary(usefulness, usefulness_prompt_ids, confidence=config.confidence,
    n_boot=n_boot, seed=seed)`` computed already (the stored panel figures): the panel then runs no
    bootstrap. None: computed here.
    """
    cfg = config or StoppingConfig()
    criteria = []

    gain, plateaued = reward_plateau(
        eval_rewards, window=cfg.plateau_window, min_gain=cfg.plateau_min_gain
    )
    criteria.append(
        Criterion(
            "reward_plateau", "Reward plateau", gain, None if gain is None else plateaued,
            f"mean gain {_fmt(gain, 4)} per evaluation over the last {cfg.plateau_window} "
            f"(needs < {cfg.plateau_min_gain})",
        )
    )  # fmt: skip

    ratings = np.asarray(usefulness, dtype=float).reshape(-1)
    prompts = np.asarray(usefulness_prompt_ids).reshape(-1)
    if summary is None:
        summary = usefulness_summary(
            ratings, prompts, confidence=cfg.confidence, n_boot=n_boot, seed=seed
        )
    per_item = np.unique(prompts, return_counts=True)[1] if prompts.size else np.array([0])
    min_reviewers = int(per_item.min())
    used = summary.mean if usefulness_choice is None else usefulness_choice.interval
    mean = used.estimate
    source = {"ppi": "prediction-powered ", "human": "human-only "}.get(
        getattr(usefulness_choice, "source", ""), ""
    )
    if ratings.size == 0:
        useful_detail = (
            f"no human rating yet, so no human interval (needs a mean of at least "
            f"{cfg.usefulness_min} with {cfg.reviewers_min} reviewers per item)"
        )
    else:
        useful_detail = (
            f"{source}{_fmt(mean, 2)} [{_fmt(used.low, 2)}, {_fmt(used.high, 2)}] "
            f"(needs >= {cfg.usefulness_min}); at least {min_reviewers} "
            f"{'reviewer' if min_reviewers == 1 else 'reviewers'} per item "
            f"(needs {cfg.reviewers_min}); {_fmt(summary.share_low * 100, 0)}% rated 2 or lower"
        )
    criteria.append(
        Criterion(
            "human_usefulness", "Human usefulness", None if ratings.size == 0 else mean,
            None if ratings.size == 0
            else bool(mean >= cfg.usefulness_min and min_reviewers >= cfg.reviewers_min),
            useful_detail,
        )
    )  # fmt: skip

    kl_mean, kl_std, stable = kl_stability(
        kl_values, window=cfg.kl_window, max_std=cfg.kl_max_std, band=cfg.kl_band
    )
    criteria.append(
        Criterion(
            "kl_stable", "KL stable", kl_std, None if kl_std is None else stable,
            f"std {_fmt(kl_std, 4)} (needs < {cfg.kl_max_std}), mean {_fmt(kl_mean)} "
            f"(needs {cfg.kl_band[0]}-{cfg.kl_band[1]}) over the last {cfg.kl_window} values",
        )
    )  # fmt: skip

    corr = reward_human_correlation(
        item_reward_scores, item_usefulness, minimum=cfg.correlation_min
    )
    # The alarm is a fall of rho from the first rated round's, not its level: a reward model
    # that disagrees with people from the start is a calibration problem (correlation_fall).
    rhos = [*list(round_correlations)[:-1], corr.rho] if len(round_correlations) else [corr.rho]
    fall = correlation_fall(rhos, minimum=cfg.correlation_min, drop=cfg.correlation_drop)
    trend = hacking_trend(round_rewards, round_win_rates)
    undecided = fall.alarm is None and not trend.red
    hacking_ok = None if undecided else not (bool(fall.alarm) or trend.red)
    start = "" if fall.reference is None else f" (first rated round {fall.reference:.2f})"
    calibration = (
        "; the reward model disagrees with people from the first rated round: a calibration "
        "problem, not counted as hacking"
        if fall.calibration
        else ""
    )
    criteria.append(
        Criterion(
            "no_hacking", "No reward-hacking alarm", None if math.isnan(corr.rho) else corr.rho,
            hacking_ok,
            f"Spearman reward vs usefulness {_fmt(corr.rho, 2)} on {corr.n} items{start} "
            f"(alarm on a fall of {cfg.correlation_drop} from the first round, or under "
            f"{cfg.correlation_min} after a start above it){calibration}; reward slope "
            f"{_fmt(trend.reward_slope, 4)}, win-rate slope {_fmt(trend.win_rate_slope, 4)} per "
            "round",
        )
    )  # fmt: skip

    base = base_comparison(round_base_win_rates)
    keep_base = keep_base_advice(base, finished=finished)
    advice = _advice(criteria, trend, finished=finished, keep_base=keep_base)
    extras = {
        "usefulness": summary,
        "usefulness_choice": usefulness_choice,
        "correlation": corr,
        "correlation_fall": fall,
        "trend": trend,
        "kl_mean": kl_mean,
        "base": base,
    }
    return StoppingPanel(criteria, trend.red, advice, extras, keep_base=keep_base is not None)

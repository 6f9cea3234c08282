"""Per-annotator bias and quality: position and length preference, tie rate, speed, gold accuracy,
swap-repeat consistency and leave-one-out agreement with the others, with Holm-adjusted tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import bdtr, bdtrc  # binomial tails; far lighter to import than scipy.stats

from annotation.agreement.bootstrap import PairwiseKappa, count_patterns
from annotation.agreement.coefficients import MISSING, N_CHOICES, TIE, A, B, item_counts


@dataclass(frozen=True)
class JudgementTable:
    """One project's judgements as columns. J judgements, I items (comparisons), R annotators.

    Choice codes are those of CHOICES (a=0, b=1, tie=2, both_bad=3), in terms of the stored responses.
    Optional columns may be None: the statistics that need them are then NaN.
    """

    item: np.ndarray  # [J] item index 0..I-1
    annotator: np.ndarray  # [J] annotator index 0..R-1
    choice: np.ndarray  # [J] choice code
    n_items: int
    n_annotators: int
    shown_left: np.ndarray | None = (
        None  # [J] A or B: the response shown on the left; MISSING unknown
    )
    elapsed_ms: np.ndarray | None = None  # [J] float milliseconds, NaN unknown
    gold: np.ndarray | None = None  # [I] the known answer's code, MISSING where none
    length_a: np.ndarray | None = None  # [I] length of response A (characters)
    length_b: np.ndarray | None = None  # [I] length of response B
    repeat_item: np.ndarray | None = None  # [S] swap repeats: item, annotator and choice of the
    repeat_annotator: np.ndarray | None = None  # second verdict (sides flipped), in stored terms
    repeat_choice: np.ndarray | None = None

    def __post_init__(self) -> None:
        j = np.shape(self.item)[0]
        for name in ("annotator", "choice", "shown_left", "elapsed_ms"):
            value = getattr(self, name)
            if value is not None and np.shape(value) != (j,):
                raise ValueError(f"{name} must have shape ({j},), got {np.shape(value)}")
        for name in ("gold", "length_a", "length_b"):
            value = getattr(self, name)
            if value is not None and np.shape(value) != (self.n_items,):
                raise ValueError(f"{name} must have shape ({self.n_items},), got {np.shape(value)}")
        if j and (np.min(self.item) < 0 or np.max(self.item) >= self.n_items):
            raise ValueError(f"item indices must lie in 0..{self.n_items - 1}")
        if j and (np.min(self.annotator) < 0 or np.max(self.annotator) >= self.n_annotators):
            raise ValueError(f"annotator indices must lie in 0..{self.n_annotators - 1}")
        if j and (np.min(self.choice) < 0 or np.max(self.choice) >= N_CHOICES):
            raise ValueError(f"choice codes must lie in 0..{N_CHOICES - 1}")


@dataclass(frozen=True)
class BiasThresholds:
    """When an annotator is flagged. Every flag also needs ``min_judgements`` judgements."""

    min_judgements: int = 20
    significance: float = 0.05  # position bias: Holm-adjusted two-sided binomial p below this
    length_bias: float = 0.15  # |longer picks - the consensus's share| above this, and significant
    # (binomial test of the picks against the consensus's share, Holm-adjusted, at `significance`)
    fast_fraction: float = (
        0.25  # suspiciously fast: under this fraction of the project's median time
    )
    fast_share: float = 0.2  # flag when more than this share of the judgements are fast
    # Mean Cohen's kappa against the others below this ("fair" or worse) and below the annotators'
    # median: in a noisy team everyone's kappa is low, and the careful annotator is not the problem.
    min_kappa: float = 0.4
    min_gold_accuracy: float = 0.7
    min_gold: int = 5
    min_consistency: float = 0.7  # swap repeats answered the same way
    min_repeats: int = 5


DEFAULT_THRESHOLDS = BiasThresholds()


@dataclass(frozen=True)
class AnnotatorStats:
    """Per-annotator bias and quality, arrays [R] (NaN where not measurable); flags: a list per annotator."""

    n_judgements: np.ndarray
    tie_rate: np.ndarray
    left_n: np.ndarray  # decisive judgements (a or b) with a known screen side
    left_share: np.ndarray  # share of those that picked the left side
    left_p_value: np.ndarray  # exact two-sided binomial test against 0.5
    left_p_adjusted: np.ndarray  # Holm-adjusted over annotators
    longer_n: np.ndarray
    longer_share: np.ndarray  # share of decisive picks that chose the longer response
    consensus_longer_share: np.ndarray  # the leave-one-out consensus's share on the same items
    length_bias: np.ndarray  # longer_share - consensus_longer_share
    longer_p_value: np.ndarray  # binomial test of the longer picks against the consensus's share
    longer_p_adjusted: np.ndarray  # Holm-adjusted over annotators
    loo_n: np.ndarray
    loo_agreement: np.ndarray  # agreement with the others' majority (ties at the top left out)
    gold_n: np.ndarray
    gold_accuracy: np.ndarray
    repeat_n: np.ndarray
    repeat_consistency: np.ndarray
    timed_n: np.ndarray
    median_ms: np.ndarray
    fast_share: np.ndarray
    fast_threshold_ms: float
    mean_kappa: np.ndarray  # n-weighted mean of Cohen's kappa against every other annotator
    flags: list[list[str]] = field(default_factory=list)


def _binomial_two_sided(
    successes: np.ndarray, trials: np.ndarray, p: float | np.ndarray = 0.5
) -> np.ndarray:
    """Exact two-sided binomial test, twice the smaller tail (the "central" test; for p = 0.5 it is
    the usual test, the distribution being symmetric). NaN where trials = 0 or p is not in (0, 1)."""
    successes = np.rint(successes).astype(np.int64)  # counts, possibly from weighted bincounts
    trials = np.rint(trials).astype(np.int64)
    p = np.broadcast_to(np.asarray(p, dtype=float), np.shape(trials))
    ok = (trials > 0) & (p > 0) & (p < 1)
    safe_p = np.where(ok, p, 0.5)
    with np.errstate(invalid="ignore"):
        tail = np.minimum(
            bdtr(successes, trials, safe_p),  # P(X <= k)
            bdtrc(successes - 1, trials, safe_p),  # P(X >= k)
        )
    return np.where(ok, np.minimum(1.0, 2.0 * tail), np.nan)


def holm_adjust(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of p-values (NaN entries are left out and stay NaN)."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full_like(p, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = order.size
    steps = (m - np.arange(m)) * p[order]
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return adjusted


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / denominator, np.nan)


def _group_medians(group: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of values [N] within each group [N] -> [n_groups] (NaN for an empty group)."""
    small = np.int16 if n_groups < 2**15 else np.int32  # stable sort of small ints is a radix sort
    order = np.argsort(group.astype(small), kind="stable")
    sorted_values = values[order]
    sizes = np.bincount(group, minlength=n_groups)
    ends = np.cumsum(sizes)
    medians = np.full(n_groups, np.nan)
    for g in np.flatnonzero(sizes):
        medians[g] = np.median(sorted_values[ends[g] - sizes[g] : ends[g]])
    return medians


def leave_one_out_consensus(table: JudgementTable, counts: np.ndarray) -> np.ndarray:
    """[J] for each judgement, the majority choice of the other annotators on the same item.

    MISSING where no other annotator judged the item or the others are split at the top. Worked out
    once per (count pattern, own choice) and looked up, not once per judgement.
    """
    patterns, _, inverse = count_patterns(counts)
    k = patterns.shape[1]
    others = patterns[:, None, :] - np.eye(k, dtype=np.int64)[None, :, :]  # [P, own choice, K]
    top = others.max(axis=2)
    unique_top = (others == top[..., None]).sum(axis=2) == 1
    table_ = np.where((top > 0) & unique_top, others.argmax(axis=2), MISSING)  # [P, own choice]
    # int8 (choice codes and MISSING): a million-judgement project holds a few such [J] arrays
    return table_.astype(np.int8)[inverse[table.item], table.choice]


def annotator_stats(
    table: JudgementTable,
    *,
    counts: np.ndarray | None = None,
    pairs: PairwiseKappa | None = None,
    thresholds: BiasThresholds = BiasThresholds(),
) -> AnnotatorStats:
    """Bias and quality of every annotator at once (bincounts over the J judgements)."""
    r = table.n_annotators
    ann, choice = np.asarray(table.annotator), np.asarray(table.choice)
    if counts is None:
        counts = item_counts(table.item, choice, n_items=table.n_items)

    def per_annotator(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        w = mask.astype(float) if weights is None else np.where(mask, weights, 0.0)
        return np.bincount(ann, weights=w, minlength=r)

    everyone = np.ones(ann.size, bool)
    n = per_annotator(everyone)
    decisive = choice <= B
    nan_r = np.full(r, np.nan)

    # Position: did the annotator pick the response shown on the left?
    if table.shown_left is not None:
        known = decisive & (table.shown_left >= 0)
        left_n = per_annotator(known)
        left_picks = per_annotator(known & (choice == table.shown_left))
        left_share = _ratio(left_picks, left_n)
        left_p = _binomial_two_sided(left_picks, left_n)
    else:
        left_n, left_share, left_p = np.zeros(r), nan_r, nan_r
    left_adjusted = holm_adjust(left_p)

    loo = leave_one_out_consensus(table, counts)
    has_loo = loo != MISSING
    loo_n = per_annotator(has_loo)
    loo_agreement = _ratio(per_annotator(has_loo & (loo == choice)), loo_n)

    # Length: picks of the longer response against the others' consensus on the same items.
    if table.length_a is not None and table.length_b is not None:
        la, lb = np.asarray(table.length_a), np.asarray(table.length_b)
        longer = np.where(la > lb, A, np.where(lb > la, B, MISSING)).astype(np.int8)[table.item]
        own = decisive & (longer != MISSING)
        longer_n = per_annotator(own)
        longer_picks = per_annotator(own & (choice == longer))
        longer_share = _ratio(longer_picks, longer_n)
        theirs = (loo <= B) & (loo != MISSING) & (longer != MISSING)
        consensus_longer = _ratio(per_annotator(theirs & (loo == longer)), per_annotator(theirs))
        longer_p = _binomial_two_sided(longer_picks, longer_n, np.nan_to_num(consensus_longer))
    else:
        longer_n, longer_share, consensus_longer, longer_p = np.zeros(r), nan_r, nan_r, nan_r

    if table.gold is not None:
        gold = np.asarray(table.gold).astype(np.int8)[table.item]
        has_gold = gold != MISSING
        gold_n = per_annotator(has_gold)
        gold_accuracy = _ratio(per_annotator(has_gold & (gold == choice)), gold_n)
    else:
        gold_n, gold_accuracy = np.zeros(r), nan_r

    repeat_n, consistency = _repeat_consistency(table)

    if table.elapsed_ms is not None:
        elapsed = np.asarray(table.elapsed_ms, dtype=float)
        timed = np.isfinite(elapsed)
        timed_n = per_annotator(timed)
        median_ms = _group_medians(ann[timed], elapsed[timed], r)
        threshold = (
            thresholds.fast_fraction * float(np.median(elapsed[timed])) if timed.any() else np.nan
        )
        fast_share = _ratio(per_annotator(timed & (elapsed < threshold)), timed_n)
    else:
        timed_n, median_ms, fast_share, threshold = np.zeros(r), nan_r, nan_r, float("nan")

    if pairs is not None and pairs.kappa.size:
        ok = np.isfinite(pairs.kappa)
        weight = np.where(ok, pairs.n, 0.0)
        weighted = np.where(ok, pairs.kappa * pairs.n, 0.0)
        total = np.bincount(pairs.first, weight, r) + np.bincount(pairs.second, weight, r)
        mean_kappa = _ratio(
            np.bincount(pairs.first, weighted, r) + np.bincount(pairs.second, weighted, r), total
        )
    else:
        mean_kappa = nan_r

    stats_ = AnnotatorStats(
        n_judgements=n.astype(np.int64),
        tie_rate=_ratio(per_annotator(choice == TIE), n),
        left_n=left_n.astype(np.int64),
        left_share=left_share,
        left_p_value=left_p,
        left_p_adjusted=left_adjusted,
        longer_n=longer_n.astype(np.int64),
        longer_share=longer_share,
        consensus_longer_share=consensus_longer,
        length_bias=longer_share - consensus_longer,
        longer_p_value=longer_p,
        longer_p_adjusted=holm_adjust(longer_p),
        loo_n=loo_n.astype(np.int64),
        loo_agreement=loo_agreement,
        gold_n=gold_n.astype(np.int64),
        gold_accuracy=gold_accuracy,
        repeat_n=repeat_n.astype(np.int64),
        repeat_consistency=consistency,
        timed_n=timed_n.astype(np.int64),
        median_ms=median_ms,
        fast_share=fast_share,
        fast_threshold_ms=threshold,
        mean_kappa=mean_kappa,
    )
    stats_.flags.extend(_flags(stats_, thresholds))
    return stats_


def _repeat_consistency(table: JudgementTable) -> tuple[np.ndarray, np.ndarray]:
    """Per annotator: swap repeats matched to their first verdict, and the share answered the same."""
    r = table.n_annotators
    if table.repeat_item is None or np.size(table.repeat_item) == 0:
        return np.zeros(r), np.full(r, np.nan)
    keys = np.asarray(table.item, np.int64) * r + table.annotator
    order = np.argsort(keys)
    wanted = np.asarray(table.repeat_item, np.int64) * r + table.repeat_annotator
    position = np.clip(np.searchsorted(keys[order], wanted), 0, keys.size - 1)
    found = keys[order][position] == wanted
    first_choice = np.asarray(table.choice)[order][position]
    same = found & (first_choice == table.repeat_choice)
    repeat_ann = np.asarray(table.repeat_annotator)
    matched = np.bincount(repeat_ann[found], minlength=r).astype(float)
    return matched, _ratio(np.bincount(repeat_ann[same], minlength=r).astype(float), matched)


# What each flag is called on pages and in alerts (the stored names are identifiers).
FLAG_LABELS = {
    "position_bias": "position bias",
    "length_bias": "length bias",
    "fast": "fast",
    "low_agreement": "low agreement",
    "low_gold_accuracy": "low gold accuracy",
    "inconsistent": "inconsistent",
}


def flag_label(flag: str) -> str:
    """A flag as a lead reads it: ``"position_bias"`` -> ``"position bias"``."""
    return FLAG_LABELS.get(flag, flag.replace("_", " "))


def _flags(s: AnnotatorStats, t: BiasThresholds) -> list[list[str]]:
    flags: list[list[str]] = []
    finite_kappa = s.mean_kappa[np.isfinite(s.mean_kappa)]
    typical_kappa = float(np.median(finite_kappa)) if finite_kappa.size else np.nan
    for i in range(s.n_judgements.size):
        mine: list[str] = []
        if s.n_judgements[i] >= t.min_judgements:
            if s.left_p_adjusted[i] < t.significance:
                mine.append("position_bias")
            if (
                s.longer_n[i] >= t.min_judgements
                and abs(s.length_bias[i]) > t.length_bias
                and s.longer_p_adjusted[i] < t.significance
            ):
                mine.append("length_bias")
            if s.timed_n[i] >= t.min_judgements and s.fast_share[i] > t.fast_share:
                mine.append("fast")
            if s.mean_kappa[i] < t.min_kappa and s.mean_kappa[i] < typical_kappa:
                mine.append("low_agreement")
            if s.gold_n[i] >= t.min_gold and s.gold_accuracy[i] < t.min_gold_accuracy:
                mine.append("low_gold_accuracy")
            if s.repeat_n[i] >= t.min_repeats and s.repeat_consistency[i] < t.min_consistency:
                mine.append("inconsistent")
        flags.append(mine)
    return flags

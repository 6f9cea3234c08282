"""A model judge measured like an annotator: pure NumPy/SciPy, no Django.

A judge (a reward model or an LLM) gives pairwise verdicts on the same comparisons as the humans, every
pair in both orders (A shown first, then B shown first). Its verdicts use the stored choice codes of
``CHOICES`` (a=0, b=1, tie=2, both_bad=3), in terms of the stored responses, never of the screen.

A judge whose verdicts were imported from a file (released verdicts, e.g. GPT-4's on MT-Bench) may
give, for an item, only the verdict its source combined from both orders (``JudgeVerdicts.combined``),
and say when the two orders disagreed without saying how (``JudgeVerdicts.inconsistent``).

- ``verdicts_from_rows``: ``JudgeVerdicts`` from stored rows (per order, or combined by a source).
- ``combine_orders``: one verdict per item from the two orders (consistent, or a tie).
- ``swap_consistency``: how often the preferred response changes when the two answers swap places.
- ``position_bias``: share of decisive verdicts that picked the response shown first, beyond 0.5.
- ``length_bias``: share of decisive verdicts that picked the longer response, against the humans'.
- ``judge_kappas``: Cohen's kappa against each human and against the humans' majority.
- ``judge_human_agreement`` / ``human_human_agreement`` / ``vote_agreement``: the MT-Bench paper's
  agreement figures (share of agreeing vote pairs, with and without ties).
- ``judge_report``: all of them, plus accuracy on gold items.
- ``reward_verdicts`` / ``calibrate_tie_band``: a reward model's score difference as a verdict, with
  the tie band that agrees best with the humans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betaincinv

from annotation.agreement.bias import JudgementTable, _binomial_two_sided
from annotation.agreement.coefficients import (
    BOTH_BAD,
    MISSING,
    N_CHOICES,
    TIE,
    A,
    B,
    cohen_kappa,
    item_counts,
)
from annotation.agreement.consensus import majority_vote


@dataclass(frozen=True)
class JudgeVerdicts:
    """One judge's V verdicts on items 0..n_items-1 (the humans' item indices).

    item: [V]; choice: [V] stored choice code; shown_first: [V] A or B, the stored response the judge
    saw first. At most one verdict per (item, order): a judge configuration answers each order once.

    combined: [I] or None, a verdict its source combined from both orders without giving them
    (an imported judge's released verdict), MISSING where there is none; an item has per-order
    verdicts or a combined one, never both. inconsistent: [I] bool or None, True where the source
    says the two orders disagreed (its combined verdict must then be a tie).
    """

    item: np.ndarray
    choice: np.ndarray
    shown_first: np.ndarray
    n_items: int
    combined: np.ndarray | None = None
    inconsistent: np.ndarray | None = None

    def __post_init__(self) -> None:
        v = np.shape(self.item)
        for name in ("choice", "shown_first"):
            if np.shape(getattr(self, name)) != v:
                raise ValueError(
                    f"{name} must have shape {v} like item, got {np.shape(getattr(self, name))}"
                )
        item, choice, first = (
            np.asarray(x, np.int64) for x in (self.item, self.choice, self.shown_first)
        )
        if item.size and (item.min() < 0 or item.max() >= self.n_items):
            raise ValueError(f"item indices must lie in 0..{self.n_items - 1}")
        if choice.size and (choice.min() < 0 or choice.max() >= N_CHOICES):
            raise ValueError(f"choice codes must lie in 0..{N_CHOICES - 1}")
        if not np.isin(first, (A, B)).all():
            raise ValueError(f"shown_first must be A ({A}) or B ({B}) for every verdict")
        keys = item * 2 + first
        if np.unique(keys).size != keys.size:
            raise ValueError("at most one verdict per item and order (shown_first)")
        combined, inconsistent = self.combined_codes(), self.inconsistent_items()
        if not np.isin(combined, (*range(N_CHOICES), MISSING)).all():
            raise ValueError(f"combined codes must lie in 0..{N_CHOICES - 1} or be MISSING")
        if (combined[item] != MISSING).any():
            raise ValueError("an item has per-order verdicts or a combined one, not both")
        if (inconsistent & (combined != TIE)).any():
            raise ValueError("an item whose orders disagreed must have a combined tie")

    def combined_codes(self) -> np.ndarray:
        """[I] the source-combined verdicts, MISSING where none (all MISSING without)."""
        if self.combined is None:
            return np.full(self.n_items, MISSING, dtype=np.int64)
        combined = np.asarray(self.combined, np.int64)
        if combined.shape != (self.n_items,):
            raise ValueError(f"combined must have shape ({self.n_items},), got {combined.shape}")
        return combined

    def inconsistent_items(self) -> np.ndarray:
        """[I] bool: the source says the two orders disagreed (all False without)."""
        if self.inconsistent is None:
            return np.zeros(self.n_items, bool)
        inconsistent = np.asarray(self.inconsistent, bool)
        if inconsistent.shape != (self.n_items,):
            raise ValueError(
                f"inconsistent must have shape ({self.n_items},), got {inconsistent.shape}"
            )
        return inconsistent

    def by_order(self) -> tuple[np.ndarray, np.ndarray]:
        """([I], [I]): the verdict with A shown first and the one with B shown first, MISSING where
        that order was not judged (or only a source-combined verdict is known)."""
        out = np.full((2, self.n_items), MISSING, dtype=np.int64)
        out[np.asarray(self.shown_first, np.int64), np.asarray(self.item, np.int64)] = self.choice
        return out[A], out[B]

    def every_verdict(self) -> tuple[np.ndarray, np.ndarray]:
        """([W], [W]) item and choice of every verdict: the per-order ones, then the
        source-combined ones (one per item)."""
        combined = self.combined_codes()
        extra = np.flatnonzero(combined != MISSING)
        item = np.concatenate([np.asarray(self.item, np.int64), extra])
        return item, np.concatenate([np.asarray(self.choice, np.int64), combined[extra]])


def verdicts_from_rows(
    *,
    item: np.ndarray,
    shown_first: np.ndarray,
    choice: np.ndarray,
    orders_disagree: np.ndarray,
    n_items: int,
) -> JudgeVerdicts:
    """``JudgeVerdicts`` from stored rows, each a verdict in one order or combined by its source.

    item: [V] item index; shown_first: [V] A or B, MISSING for a source-combined verdict;
    choice: [V] choice code; orders_disagree: [V] bool, a combined verdict whose source says the
    orders disagreed (its choice a tie).
    """
    item, first, choice = (np.asarray(x, np.int64) for x in (item, shown_first, choice))
    disagree = np.asarray(orders_disagree, bool)
    if not item.shape == first.shape == choice.shape == disagree.shape:
        raise ValueError("item, shown_first, choice and orders_disagree must have one shape")
    if (disagree & (first != MISSING)).any():
        raise ValueError("only a source-combined verdict (shown_first MISSING) can disagree")
    per_order = first != MISSING
    combined = np.full(n_items, MISSING, dtype=np.int64)
    whole = item[~per_order]
    if np.unique(whole).size != whole.size:
        raise ValueError("at most one source-combined verdict per item")
    combined[whole] = choice[~per_order]
    inconsistent = np.zeros(n_items, bool)
    inconsistent[item[disagree]] = True
    return JudgeVerdicts(
        item=item[per_order],
        choice=choice[per_order],
        shown_first=first[per_order],
        n_items=n_items,
        combined=combined,
        inconsistent=inconsistent,
    )


def combine_orders(verdicts: JudgeVerdicts) -> np.ndarray:
    """[I] one verdict per item: the verdict of both orders when they agree, a tie when they do not
    (a preference that does not survive the swap is no preference; Zheng et al. 2023, MT-Bench), the
    only verdict when one order was judged, the source's verdict where only a combined one is known
    (a tie where its orders disagreed), MISSING when none was."""
    a_first, b_first = verdicts.by_order()
    both = (a_first != MISSING) & (b_first != MISSING)
    single = np.where(a_first != MISSING, a_first, b_first)
    single = np.where(single != MISSING, single, verdicts.combined_codes())
    return np.where(both, np.where(a_first == b_first, a_first, TIE), single)


@dataclass(frozen=True)
class SwapConsistency:
    """Verdicts on the same pair in both orders.

    pairs: items judged in both orders; same_rate: share of them with the same verdict.
    decisive_pairs: pairs decisive (A or B) in both orders; flips: those whose preferred response
    changed (A in one order, B in the other); flip_rate = flips / decisive_pairs.
    half_flips: pairs decisive in one order only (the other a tie or both bad).

    A source-combined verdict (an imported judge) says both orders gave that verdict, or (an
    inconsistent item) that they disagreed without saying how: such items count among ``pairs``
    (a consistent decisive one among ``decisive_pairs`` with no flip); ``undetailed`` counts the
    inconsistent ones, which may be flips or half flips, so flip_rate is then a lower bound and
    flip_rate_high = (flips + undetailed) / (decisive_pairs + undetailed) the upper one (equal to
    flip_rate when undetailed is 0).
    """

    pairs: int
    same_rate: float
    decisive_pairs: int
    flips: int
    flip_rate: float
    half_flips: int
    undetailed: int = 0
    flip_rate_high: float = float("nan")


def _share(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator > 0 else float("nan")


def swap_consistency(verdicts: JudgeVerdicts) -> SwapConsistency:
    """How the judge's verdict changes when the two responses swap places (in stored terms, so a
    judge without position bias gives the same code in both orders)."""
    a_first, b_first = verdicts.by_order()
    combined, inconsistent = verdicts.combined_codes(), verdicts.inconsistent_items()
    known = (combined != MISSING) & ~inconsistent  # both orders gave this verdict
    a_first = np.where(known, combined, a_first)
    b_first = np.where(known, combined, b_first)
    both = (a_first != MISSING) & (b_first != MISSING)
    x, y = a_first[both], b_first[both]
    decisive_x, decisive_y = x <= B, y <= B
    decisive = decisive_x & decisive_y
    flips = int((decisive & (x != y)).sum())
    undetailed = int(inconsistent.sum())
    pairs = int(both.sum()) + undetailed
    return SwapConsistency(
        pairs=pairs,
        same_rate=_share((x == y).sum(), pairs),
        decisive_pairs=int(decisive.sum()),
        flips=flips,
        flip_rate=_share(flips, decisive.sum()),
        half_flips=int((decisive_x != decisive_y).sum()),
        undetailed=undetailed,
        flip_rate_high=_share(flips + undetailed, decisive.sum() + undetailed),
    )


@dataclass(frozen=True)
class PositionBias:
    """n: decisive verdicts; first_picks: those that picked the response shown first;
    share = first_picks / n; bias = share - 0.5 (positive: favours the first shown);
    low/high: exact (Clopper-Pearson) interval of the share; p_value: exact two-sided binomial test
    of share = 0.5."""

    n: int
    first_picks: int
    share: float
    bias: float
    low: float
    high: float
    p_value: float


def clopper_pearson(successes: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval (Clopper & Pearson 1934) from the beta quantiles:
    low = Beta^-1(alpha/2; k, n-k+1), high = Beta^-1(1-alpha/2; k+1, n-k); [0, 1] when n = 0."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else float(betaincinv(successes, n - successes + 1, tail))
    high = 1.0 if successes == n else float(betaincinv(successes + 1, n - successes, 1 - tail))
    return low, high


def position_bias(verdicts: JudgeVerdicts, *, confidence: float = 0.95) -> PositionBias:
    """Share of the judge's decisive verdicts that picked the response it saw first (per-order
    verdicts only: a source-combined verdict does not say what was shown first)."""
    choice = np.asarray(verdicts.choice)
    decisive = choice <= B
    n = int(decisive.sum())
    first = int((decisive & (choice == np.asarray(verdicts.shown_first))).sum())
    share = _share(first, n)
    low, high = clopper_pearson(first, n, confidence=confidence)
    p = float(_binomial_two_sided(np.array([first]), np.array([n]))[0])
    return PositionBias(n, first, share, share - 0.5, low, high, p)


def _longer(length_a: np.ndarray | None, length_b: np.ndarray | None) -> np.ndarray:
    if length_a is None or length_b is None:
        raise ValueError("length bias needs length_a and length_b on the humans' JudgementTable")
    la, lb = np.asarray(length_a), np.asarray(length_b)
    return np.where(la > lb, A, np.where(lb > la, B, MISSING))


@dataclass(frozen=True)
class LengthBias:
    """n: the judge's decisive verdicts on items of unequal length; share: those that picked the
    longer response. human_n, human_share: the same for the humans' decisive judgements on the items
    the judge judged. bias = share - human_share; p_value: exact binomial test of the judge's
    longer picks against the humans' share."""

    n: int
    share: float
    human_n: int
    human_share: float
    bias: float
    p_value: float


def length_bias(verdicts: JudgeVerdicts, humans: JudgementTable) -> LengthBias:
    """The judge's preference for the longer answer beyond the humans' own (humans often do prefer
    the longer answer a little; the bias is what the judge adds). Source-combined verdicts count
    once each."""
    longer = _longer(humans.length_a, humans.length_b)
    item, choice = verdicts.every_verdict()
    own = (choice <= B) & (longer[item] != MISSING)
    picks = int((own & (choice == longer[item])).sum())
    judged = np.zeros(humans.n_items, bool)
    judged[item] = True
    h_item, h_choice = np.asarray(humans.item), np.asarray(humans.choice)
    theirs = judged[h_item] & (h_choice <= B) & (longer[h_item] != MISSING)
    human_share = _share((theirs & (h_choice == longer[h_item])).sum(), theirs.sum())
    share = _share(picks, own.sum())
    p = np.nan
    if own.sum() and not np.isnan(human_share):
        p = float(_binomial_two_sided(np.array([picks]), np.array([own.sum()]), human_share)[0])
    return LengthBias(int(own.sum()), share, int(theirs.sum()), human_share, share - human_share, p)


@dataclass(frozen=True)
class JudgeKappas:
    """per_human: [R] Cohen's kappa of the judge's combined verdict against each human on the items
    both judged (NaN under 2 shared items or when chance agreement is total); per_human_n: [R] those
    items. consensus: kappa against the humans' majority label (undecided items left out) on
    consensus_n items."""

    per_human: np.ndarray
    per_human_n: np.ndarray
    consensus: float
    consensus_n: int


def _kappa(first: np.ndarray, second: np.ndarray) -> float:
    return cohen_kappa(first, second) if first.size >= 2 else float("nan")


def judge_kappas(combined: np.ndarray, humans: JudgementTable) -> JudgeKappas:
    """Agreement of the judge with every human and with the human consensus.

    combined: [I] the judge's verdict per item (``combine_orders``), MISSING where not judged.
    """
    combined = np.asarray(combined)
    if combined.shape != (humans.n_items,):
        raise ValueError(f"combined must have shape ({humans.n_items},), got {combined.shape}")
    h_item, h_ann = np.asarray(humans.item), np.asarray(humans.annotator)
    h_choice = np.asarray(humans.choice)
    judge_on = combined[h_item]
    shared = judge_on != MISSING
    per_human = np.full(humans.n_annotators, np.nan)
    per_human_n = np.bincount(h_ann[shared], minlength=humans.n_annotators)
    for r in np.flatnonzero(per_human_n):
        mine = shared & (h_ann == r)
        per_human[r] = _kappa(judge_on[mine], h_choice[mine])
    counts = item_counts(h_item, h_choice, n_items=humans.n_items)
    label = majority_vote(counts).label
    both = (label != MISSING) & (combined != MISSING)
    return JudgeKappas(per_human, per_human_n, _kappa(combined[both], label[both]), int(both.sum()))


@dataclass(frozen=True)
class PairAgreement:
    """agree of n vote pairs gave the same verdict; rate = agree / n (NaN when n = 0)."""

    agree: int
    n: int
    rate: float


def _tie_merged(choice: np.ndarray) -> np.ndarray:
    # FastChat's compute_agreement counts every label containing "tie" as a tie, "tie (bothbad)" too.
    choice = np.asarray(choice, np.int64)
    return np.where(choice == BOTH_BAD, TIE, choice)


def judge_human_agreement(
    combined: np.ndarray, humans: JudgementTable, *, ties: bool = True
) -> PairAgreement:
    """Share of (judge verdict, human vote) pairs that agree, over every human vote on an item the
    judge judged (Zheng et al. 2023, MT-Bench, Table 5; FastChat ``compute_agreement.py``).

    combined: [I] the judge's verdict per item (``combine_orders``: an order-inconsistent pair is a
    tie, the paper's setup S1), MISSING where not judged. Both bad counts as a tie. ``ties=False``
    (setup S2) drops the pairs where either side says tie.
    """
    combined = np.asarray(combined)
    if combined.shape != (humans.n_items,):
        raise ValueError(f"combined must have shape ({humans.n_items},), got {combined.shape}")
    judge_on = _tie_merged(combined)[np.asarray(humans.item, np.int64)]
    vote = _tie_merged(humans.choice)
    keep = judge_on != MISSING
    if not ties:
        keep &= (judge_on != TIE) & (vote != TIE)
    agree, n = int((keep & (judge_on == vote)).sum()), int(keep.sum())
    return PairAgreement(agree, n, _share(agree, n))


def human_human_agreement(
    humans: JudgementTable, *, ties: bool = True, items: np.ndarray | None = None
) -> PairAgreement:
    """Share of pairs of votes by two different humans on the same item that agree (every such
    pair counted once; MT-Bench, Table 5, "human vs human").

    items: [I] bool, the items to count (default all; the judge report passes the judged ones, so
    humans and judge are measured on the same comparisons). Both bad counts as a tie; ``ties=False``
    drops the pairs where either vote is a tie. With c[i, k] the votes k on item i and m[i, r, k]
    those of human r (1 in a table without repeats): agree = sum C(c, 2) - sum C(m, 2) over k, and
    n the same over all kept votes.
    """
    item = np.asarray(humans.item, np.int64)
    annotator = np.asarray(humans.annotator, np.int64)
    vote = _tie_merged(humans.choice)
    keep = np.ones(item.size, bool) if items is None else np.asarray(items, bool)[item]
    if not ties:
        keep &= vote != TIE
    item, annotator, vote = item[keep], annotator[keep], vote[keep]

    def pairs(*keys: np.ndarray) -> int:
        if not keys[0].size:
            return 0
        _, counts = np.unique(np.stack(keys), axis=1, return_counts=True)
        return int((counts * (counts - 1) // 2).sum())

    agree = pairs(item, vote) - pairs(item, annotator, vote)
    n = pairs(item) - pairs(item, annotator)
    return PairAgreement(agree, n, _share(agree, n))


@dataclass(frozen=True)
class VoteAgreement:
    """The MT-Bench paper's agreement figures for one judge (Zheng et al. 2023, Table 5): judge vs
    humans over all (judge, human vote) pairs and humans vs humans on the judged items, with ties
    (setup S1: an order-inconsistent judge verdict counts as a tie) and without (setup S2)."""

    judge_human: PairAgreement
    judge_human_no_ties: PairAgreement
    human_human: PairAgreement
    human_human_no_ties: PairAgreement

    def summary(self, digits: int = 4) -> dict[str, float | int | None]:
        """Plain numbers: each figure's rate (None when undefined) and its pair count ``<name>_n``."""
        out: dict[str, float | int | None] = {}
        for name in ("judge_human", "judge_human_no_ties", "human_human", "human_human_no_ties"):
            figure = getattr(self, name)
            out[name] = None if np.isnan(figure.rate) else round(figure.rate, digits)
            out[f"{name}_n"] = figure.n
        return out


def vote_agreement(combined: np.ndarray, humans: JudgementTable) -> VoteAgreement:
    """All four figures; humans vs humans on the items the judge judged (combined != MISSING)."""
    judged = np.asarray(combined) != MISSING
    return VoteAgreement(
        judge_human=judge_human_agreement(combined, humans, ties=True),
        judge_human_no_ties=judge_human_agreement(combined, humans, ties=False),
        human_human=human_human_agreement(humans, ties=True, items=judged),
        human_human_no_ties=human_human_agreement(humans, ties=False, items=judged),
    )


@dataclass(frozen=True)
class JudgeReport:
    """Everything the judge report page shows. gold_n / gold_accuracy: items with a known answer
    that the judge judged, and the share its combined verdict got right (NaN without gold)."""

    n_verdicts: int  # per-order verdicts plus source-combined ones
    n_items: int  # items with at least one verdict
    tie_rate: float  # share of verdicts that are ties
    swap: SwapConsistency
    position: PositionBias
    length: LengthBias | None  # None without response lengths
    kappas: JudgeKappas
    gold_n: int
    gold_accuracy: float
    votes: VoteAgreement  # the MT-Bench paper's agreement figures


def judge_report(
    verdicts: JudgeVerdicts, humans: JudgementTable, *, confidence: float = 0.95
) -> JudgeReport:
    """The judge measured like an annotator against the humans' judgements of the same items.

    humans: the project's human judgements (its gold, length_a, length_b columns are used when set).
    """
    if verdicts.n_items != humans.n_items:
        raise ValueError(
            f"the judge's n_items ({verdicts.n_items}) must equal the humans' ({humans.n_items})"
        )
    combined = combine_orders(verdicts)
    judged = combined != MISSING
    gold_n, gold_accuracy = 0, float("nan")
    if humans.gold is not None:
        gold = np.asarray(humans.gold)
        has = judged & (gold != MISSING)
        gold_n, gold_accuracy = (
            int(has.sum()),
            _share((combined[has] == gold[has]).sum(), has.sum()),
        )
    has_lengths = humans.length_a is not None and humans.length_b is not None
    _, choice = verdicts.every_verdict()
    return JudgeReport(
        n_verdicts=int(choice.size),
        n_items=int(judged.sum()),
        tie_rate=_share((choice == TIE).sum(), choice.size),
        swap=swap_consistency(verdicts),
        position=position_bias(verdicts, confidence=confidence),
        length=length_bias(verdicts, humans) if has_lengths else None,
        kappas=judge_kappas(combined, humans),
        gold_n=gold_n,
        gold_accuracy=gold_accuracy,
        votes=vote_agreement(combined, humans),
    )


# --- A reward model as a judge --------------------------------------------------------------------


def reward_verdicts(score_diff: np.ndarray, *, tie_band: float) -> np.ndarray:
    """[I] verdict codes of a reward model from its score differences d = r(A) - r(B): A when
    d > tie_band, B when d < -tie_band, a tie otherwise (|d| <= tie_band)."""
    if not tie_band >= 0:
        raise ValueError(f"tie_band must be >= 0, got {tie_band}")
    d = np.asarray(score_diff, dtype=float)
    if not np.isfinite(d).all():
        raise ValueError("score_diff must be finite numbers")
    return np.where(d > tie_band, A, np.where(d < -tie_band, B, TIE))


@dataclass(frozen=True)
class TieBand:
    """The calibrated band: width (in reward units), the kappa with the humans it reaches, and the
    items it was calibrated on."""

    width: float
    kappa: float
    n: int


def calibrate_tie_band(
    score_diff: np.ndarray, human_label: np.ndarray, *, max_candidates: int = 200
) -> TieBand:
    """The tie band under which the reward model's verdicts agree best with the humans' labels
    (Cohen's kappa), the narrowest among equally good ones.

    score_diff: [M] r(A) - r(B) on items with a human label; human_label: [M] the humans' label
    per item (their majority: A, B or TIE; other codes and MISSING are left out). Candidates: 0 and
    the |d| values themselves (a band equal to |d| makes that item a tie), thinned to at most
    ``max_candidates`` quantiles of |d| on large sets.
    """
    d = np.asarray(score_diff, dtype=float)
    label = np.asarray(human_label)
    if d.shape != label.shape or d.ndim != 1:
        raise ValueError(
            f"score_diff and human_label must be 1-d of one length, got {d.shape}, {label.shape}"
        )
    keep = np.isin(label, (A, B, TIE))
    d, label = d[keep], label[keep]
    if d.size < 2:
        raise ValueError(f"need at least 2 items with an A, B or tie label, got {d.size}")
    magnitudes = np.unique(np.abs(d))
    if magnitudes.size > max_candidates:
        magnitudes = np.unique(np.quantile(magnitudes, np.linspace(0, 1, max_candidates)))
    candidates = np.unique(np.concatenate([[0.0], magnitudes]))
    kappas = np.array([_kappa(reward_verdicts(d, tie_band=c), label) for c in candidates])
    if np.isnan(kappas).all():
        return TieBand(0.0, float("nan"), int(d.size))
    best = int(np.nanargmax(kappas))  # the first maximum: the narrowest band
    return TieBand(float(candidates[best]), float(kappas[best]), int(d.size))

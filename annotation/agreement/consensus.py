"""Consensus labels: majority vote and Dawid-Skene posteriors, each with its margin.

One rule for the winner of an item (``top_choice``), with what to do when several categories share
the top score (a split) as a parameter: the agreement report leaves a split undecided; the export
turns a split between a and b (or one involving tie) into a tie. One rule for the margin of a
posterior (``side_margin``): P(chosen) - P(rejected), the figure the export writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from annotation.agreement.coefficients import MISSING, N_CHOICES, TIE, A, B, item_counts

if TYPE_CHECKING:
    from annotation.agreement.bias import JudgementTable

SPLITS = ("undecided", "tie")
LOG_FLOOR = -700.0  # posterior_given_fit: log scores below the top by more than this count as this


@dataclass(frozen=True)
class Consensus:
    """A consensus label per item. label [I] (MISSING where undecided or unjudged), posterior [I, K]
    (soft label: a probability per category), margin [I] (majority vote: top share minus the
    runner-up; Dawid-Skene: ``side_margin``; NaN where unjudged)."""

    label: np.ndarray
    posterior: np.ndarray
    margin: np.ndarray


def top_choice(scores: np.ndarray, *, split: str = "undecided") -> np.ndarray:
    """The winning category code of each item. scores: [I, K] vote counts or posteriors, columns in
    CHOICES order (a, b, tie, both_bad; K may be smaller for projects without tie or both bad).

    One highest score: its category. Several (a split), by ``split``:

    - "undecided": MISSING (the agreement report's majority vote and Dawid-Skene labels);
    - "tie": TIE when the leaders include both a and b, or tie itself; otherwise a or b (level
      with both bad), since the order still has a preferred side (the export's rule).

    (a, b) = (2, 2) -> undecided: MISSING, tie: TIE; (a, both_bad) = (1, 1) -> MISSING, a.
    Returns int64 [I].
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split rule {split!r}; expected one of {SPLITS}")
    table = np.asarray(scores, dtype=float)
    if table.ndim != 2 or table.shape[1] == 0:
        raise ValueError(f"scores must be [items, categories], got shape {table.shape}")
    leaders = table == table.max(axis=1, keepdims=True)
    label = table.argmax(axis=1).astype(np.int64)  # the first leader: a before b before both_bad
    split_rows = leaders.sum(axis=1) > 1
    if split == "undecided":
        return np.where(split_rows, MISSING, label)

    def leads(code: int) -> np.ndarray:
        return leaders[:, code] if code < table.shape[1] else np.zeros(len(table), dtype=bool)

    to_tie = split_rows & ((leads(A) & leads(B)) | leads(TIE))
    return np.where(to_tie, TIE, label)


def side_margin(posterior: np.ndarray, label: np.ndarray) -> np.ndarray:
    """P(chosen) - P(rejected) per item: posterior [I, K] in CHOICES order, label [I] (category
    codes). For label a it is P(a) - P(b), for b P(b) - P(a); 0 for tie, both bad or MISSING (no
    order to weigh). Posterior (.8, .15, .05, 0) with label a -> .65. Returns float [I]."""
    posterior = np.asarray(posterior, dtype=float)
    label = np.asarray(label)
    margin = np.zeros(len(label))
    for chosen, rejected in ((A, B), (B, A)):
        rows = label == chosen
        margin[rows] = posterior[rows, chosen] - posterior[rows, rejected]
    return margin


def _consensus_from_posterior(posterior: np.ndarray, judged: np.ndarray) -> Consensus:
    """Dawid-Skene posteriors as labels (a split undecided) with ``side_margin``."""
    label = np.where(judged, top_choice(posterior), MISSING)
    margin = np.where(judged, side_margin(posterior, label), np.nan)
    return Consensus(label=label, posterior=posterior, margin=margin)


def majority_vote(counts: np.ndarray, *, split: str = "undecided") -> Consensus:
    """The most chosen category per item (``top_choice``: a tie at the top is undecided, label
    MISSING, unless ``split`` says otherwise); the posterior is the share of votes, the margin the
    top share minus the runner-up (0 for a split, NaN when unjudged). counts: [I, K]."""
    table = np.asarray(counts, dtype=float)
    n = table.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.nan_to_num(np.where(n[:, None] > 0, table / n[:, None], np.nan))
    judged = n > 0
    top2 = np.sort(shares, axis=1)[:, -2:] if shares.shape[1] >= 2 else None
    margin = top2[:, 1] - top2[:, 0] if top2 is not None else np.ones(shares.shape[0])
    label = np.where(judged, top_choice(table, split=split), MISSING)
    return Consensus(label=label, posterior=shares, margin=np.where(judged, margin, np.nan))


def _row_reduce(ufunc: np.ufunc, matrix: np.ndarray) -> np.ndarray:
    """ufunc over the columns of a narrow [N, K] matrix, column by column (much faster than axis=1)."""
    out = matrix[:, 0].copy()
    for column in range(1, matrix.shape[1]):
        ufunc(out, matrix[:, column], out=out)
    return out


@dataclass(frozen=True)
class DawidSkene:
    """Result of Dawid-Skene EM. consensus: soft labels; confusion [R, K, K]: P(annotator says l |
    true class k); priors [K]; iterations run; log_likelihood of the data at the end."""

    consensus: Consensus
    confusion: np.ndarray
    priors: np.ndarray
    iterations: int
    log_likelihood: float


def dawid_skene(
    item: np.ndarray,
    annotator: np.ndarray,
    label: np.ndarray,
    *,
    n_items: int,
    n_annotators: int,
    n_categories: int = N_CHOICES,
    max_iter: int = 100,
    tol: float = 1e-7,
    smoothing: float = 0.01,
    init_confusion: np.ndarray | None = None,
    init_priors: np.ndarray | None = None,
) -> DawidSkene:
    """Dawid & Skene (1979) EM: each annotator has a confusion matrix, each item a latent true class.

    item, annotator, label: [J] judgements. Starts from the majority-vote shares, or, given
    ``init_confusion`` [R, K, K] (P(says l | true k), rows summing to 1) and ``init_priors`` [K], from
    their E-step (a warm start from an earlier fit: an annotator it did not know gets uniform rows).
    The M-step adds ``smoothing`` pseudo-counts to every confusion cell (and prior) so an annotator
    who never used a category keeps a finite likelihood. Stops when the log-likelihood gains less
    than tol x |LL| (or after ``max_iter`` rounds).
    The posterior over true classes is the soft label a bias-aware export uses; annotators who, e.g.,
    favour the left side or the longer answer get confusion matrices that discount those votes.

    Both steps are products with the one-hot vote matrix (SciPy sparse: a vote's log confusion row
    summed per item, a vote's posterior row summed per (annotator, said) cell). Only judged items
    take part; an unjudged item's posterior is the priors (it adds log 1 = 0 to the
    log-likelihood), so a project of many unjudged comparisons costs no more than its votes.
    """
    from scipy import sparse  # only consensus needs it; the report and the command do not

    item = np.asarray(item, np.int64)
    annotator = np.asarray(annotator, np.int64)
    label = np.asarray(label, np.int64)
    k = n_categories
    counts = item_counts(item, label, n_items=n_items, n_categories=k)
    n_votes = counts.sum(axis=1)
    judged = n_votes > 0
    # votes[m, r * K + l] = 1 when annotator r said l on judged item m (0..M-1).
    judged_index = np.cumsum(judged) - 1
    n_judged = int(judged.sum())
    votes = sparse.csr_matrix(
        (np.ones(item.size), (judged_index[item], annotator * k + label)),
        shape=(n_judged, n_annotators * k),
    )
    votes_t = votes.T  # CSC: the M-step walks items in order (sequential reads of the posterior)
    ones = np.ones(n_judged)

    def e_step(log_conf: np.ndarray, log_priors: np.ndarray) -> tuple[np.ndarray, float]:
        """Posterior [M, K] of the judged items and the log-likelihood, from log_conf [R * K
        (annotator, said), K true] and log_priors [K]."""
        scores = votes @ log_conf
        scores += log_priors
        top = _row_reduce(np.maximum, scores)
        scores -= top[:, None]
        np.exp(scores, out=scores)
        normaliser = _row_reduce(np.add, scores)
        scores /= normaliser[:, None]
        return scores, float(top.sum() + np.log(normaliser).sum())

    if init_confusion is not None:
        start_confusion, start_priors = _warm_start(init_confusion, init_priors, n_annotators, k)
        log_start = np.log(start_confusion).transpose(0, 2, 1).reshape(n_annotators * k, k)
        posterior, _ = e_step(log_start, np.log(start_priors))
    else:
        posterior = counts[judged] / n_votes[judged, None]
    previous = -np.inf
    log_likelihood = -np.inf
    iterations = 0
    confusion = np.full((n_annotators, k, k), 1.0 / k)
    priors = np.full(k, 1.0 / k)
    while iterations < max_iter:
        iterations += 1
        # M-step: priors and confusion[r, true, said] from the current soft labels.
        priors = ones @ posterior + smoothing
        priors /= priors.sum()
        said_true = votes_t @ posterior  # [R * K (annotator, said), K true]
        confusion = said_true.reshape(n_annotators, k, k).transpose(0, 2, 1) + smoothing
        confusion /= confusion.sum(axis=2, keepdims=True)
        # E-step: log P(true = t | item) = log prior_t + sum over its votes of log confusion.
        log_conf = np.log(confusion).transpose(0, 2, 1).reshape(n_annotators * k, k)
        posterior, log_likelihood = e_step(log_conf, np.log(priors))
        if log_likelihood - previous < tol * abs(log_likelihood):
            break
        previous = log_likelihood
    full = np.empty((n_items, k))
    full[:] = priors / priors.sum()
    full[judged] = posterior
    return DawidSkene(
        consensus=_consensus_from_posterior(full, judged),
        confusion=confusion,
        priors=priors,
        iterations=iterations,
        log_likelihood=log_likelihood,
    )


def _warm_start(
    confusion: np.ndarray, priors: np.ndarray | None, n_annotators: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """An earlier fit's confusion [R, K, K] and priors [K] (uniform when None), checked and
    floored at 1e-300 so their logs are finite."""
    confusion = np.asarray(confusion, dtype=float)
    if confusion.shape != (n_annotators, k, k):
        raise ValueError(
            f"init_confusion must be [annotators, K, K] = {(n_annotators, k, k)}, "
            f"got {confusion.shape}"
        )
    priors = np.full(k, 1.0 / k) if priors is None else np.asarray(priors, dtype=float)
    if priors.shape != (k,):
        raise ValueError(f"init_priors must be [K] = ({k},), got {priors.shape}")
    if not (np.isfinite(confusion).all() and np.isfinite(priors).all()):
        raise ValueError("init_confusion and init_priors must be finite")
    return np.maximum(confusion, 1e-300), np.maximum(priors, 1e-300)


def table_dawid_skene(table: JudgementTable) -> DawidSkene:
    """``dawid_skene`` at its defaults over a project's judgement columns (``JudgementTable``:
    items, annotators and choices in stored terms)."""
    return dawid_skene(
        table.item,
        table.annotator,
        table.choice,
        n_items=table.n_items,
        n_annotators=table.n_annotators,
    )


@dataclass(frozen=True)
class StoredFigures:
    """What the stored consensus table holds per item, computed from the votes and a fixed
    Dawid-Skene fit (the reference for the database's incremental update). All [I]:
    n_votes, n_choices (distinct choices among them), majority label (MISSING when the top is
    shared: ``split``), majority margin (top vote share minus the runner-up's), Dawid-Skene label
    (MISSING when the top posterior is shared), ds_margin (``side_margin``); posterior [I, K]."""

    n_votes: np.ndarray
    n_choices: np.ndarray
    majority: np.ndarray
    majority_margin: np.ndarray
    split: np.ndarray
    ds_label: np.ndarray
    ds_margin: np.ndarray
    posterior: np.ndarray


def posterior_given_fit(
    item: np.ndarray, vote_log: np.ndarray, *, n_items: int, log_priors: np.ndarray
) -> np.ndarray:
    """Dawid-Skene's E-step with the fit held fixed: P(true class | votes) per item.

    item [J]: each vote's item; vote_log [J, K]: log P(the vote's choice | true class k) under its
    annotator's fitted confusion matrix (a row of zeros for an annotator the fit has not seen: the
    vote carries no information until the next fit); log_priors [K]. Returns posterior [I, K]
    (the priors for an item without votes). With the fit's own confusion and priors this is the
    posterior ``dawid_skene`` ends with (its last step is this E-step).
    """
    vote_log = np.asarray(vote_log, dtype=float).reshape(-1, len(log_priors))
    item = np.asarray(item, np.int64)
    scores = np.empty((n_items, len(log_priors)))
    for c in range(len(log_priors)):  # per-item sums in vote order, as np.add.at adds (faster)
        scores[:, c] = np.bincount(item, weights=vote_log[:, c], minlength=n_items)
    scores += np.asarray(log_priors, dtype=float)
    scores -= scores.max(axis=1, keepdims=True)
    np.maximum(scores, LOG_FLOOR, out=scores)  # as the database does: its exp refuses underflow
    np.exp(scores, out=scores)
    return scores / scores.sum(axis=1, keepdims=True)


def stored_figures(
    item: np.ndarray,
    choice: np.ndarray,
    vote_log: np.ndarray,
    *,
    n_items: int,
    log_priors: np.ndarray,
) -> StoredFigures:
    """The stored consensus of ``n_items`` items from their votes: item, choice [J] (CHOICES
    codes), vote_log [J, K] as ``posterior_given_fit`` takes it. Majority and its margin are
    ``majority_vote``'s (a split undecided); Dawid-Skene is ``posterior_given_fit`` with its label
    (a shared top undecided) and ``side_margin``. Items without votes get zeros and MISSING."""
    item = np.asarray(item, np.int64)
    k = len(log_priors)
    counts = item_counts(item, np.asarray(choice, np.int64), n_items=n_items, n_categories=k)
    majority = majority_vote(counts)
    n_votes = counts.sum(axis=1).astype(np.int64)
    judged = n_votes > 0
    posterior = posterior_given_fit(item, vote_log, n_items=n_items, log_priors=log_priors)
    ds = _consensus_from_posterior(posterior, judged)
    leaders = counts == counts.max(axis=1, keepdims=True)
    return StoredFigures(
        n_votes=n_votes,
        n_choices=(counts > 0).sum(axis=1).astype(np.int64),
        majority=majority.label,
        majority_margin=np.where(judged, majority.margin, 0.0),
        split=judged & (leaders.sum(axis=1) > 1),
        ds_label=ds.label,
        ds_margin=np.where(judged, ds.margin, 0.0),
        posterior=posterior,
    )

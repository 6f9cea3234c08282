"""The project report: every coefficient with its interval, pairwise kappas, consensus and the
per-annotator figures, from columnar judgements."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from annotation.agreement.bias import (
    DEFAULT_THRESHOLDS,
    AnnotatorStats,
    BiasThresholds,
    JudgementTable,
    annotator_stats,
)
from annotation.agreement.bootstrap import (
    Interval,
    PairwiseKappa,
    coefficient_intervals,
    pairwise_cohen,
)
from annotation.agreement.coefficients import TIE, item_counts


@dataclass(frozen=True)
class AgreementReport:
    """Everything the agreement page and command show for one project (indices, not names).

    n_items: comparisons with at least one judgement; n_items_full_overlap: those with >= overlap.
    coefficients: {name in COEFFICIENTS: Interval}.
    """

    n_items: int
    n_judgements: int
    n_annotators: int
    n_items_full_overlap: int
    coefficients: dict[str, Interval]
    pairs: PairwiseKappa
    annotators: AnnotatorStats
    counts: np.ndarray  # [I, K] per-item choice counts


def agreement_report(
    table: JudgementTable,
    *,
    overlap: int | None = None,
    n_categories: int | None = None,
    n_boot: int = 1000,
    pair_boot: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
    thresholds: BiasThresholds = DEFAULT_THRESHOLDS,
) -> AgreementReport:
    """The whole report: coefficients with bootstrap intervals, every pair's Cohen, annotator stats.

    overlap: Fleiss' kappa uses the comparisons with at least this many judgements (the project's full
    overlap; None: all). n_categories: q for AC1 (the choices the project offers; default: the
    categories used). n_boot: replicates for the coefficients; pair_boot: for every pair's kappa
    (off by default: ~6 ms per replicate at 5,000 pairs).
    """
    counts = item_counts(table.item, table.choice, n_items=table.n_items)
    used = counts.sum(axis=0) > 0
    q = n_categories if n_categories is not None else max(2, int(used.sum()))
    judged = counts.sum(axis=1) > 0
    coefficients = coefficient_intervals(
        counts[judged][:, used] if used.any() else counts[judged],
        n_categories=q,
        full_overlap=overlap,
        tie=int(used[:TIE].sum()) if used[TIE] else None,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
    pairs = pairwise_cohen(
        table.item,
        table.annotator,
        table.choice,
        n_annotators=table.n_annotators,
        n_items=int(judged.sum()),
        n_boot=pair_boot,
        confidence=confidence,
        seed=seed,
    )
    per_annotator = annotator_stats(table, counts=counts, pairs=pairs, thresholds=thresholds)
    m = counts.sum(axis=1)
    return AgreementReport(
        n_items=int(judged.sum()),
        n_judgements=int(np.size(table.item)),
        n_annotators=int(np.unique(table.annotator).size),
        n_items_full_overlap=int((m >= (overlap or 1)).sum()),
        coefficients=coefficients,
        pairs=pairs,
        annotators=per_annotator,
        counts=counts,
    )

"""Agreement per group of comparisons (prompt cluster, batch, week)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GroupAgreement:
    """Agreement inside each of G groups of items. Arrays [G]; NaN where a group has no rater pair."""

    n_items: np.ndarray
    n_judgements: np.ndarray
    percent_agreement: np.ndarray
    fleiss_kappa: np.ndarray


def agreement_by_group(counts: np.ndarray, group: np.ndarray, *, n_groups: int) -> GroupAgreement:
    """Pooled percent agreement and (generalised) Fleiss' kappa per group of items.

    counts: [I, K] per-item category counts; group: [I] group index in 0..n_groups-1, or MISSING to
    leave an item out. All groups at once with bincounts.
    """
    table = np.asarray(counts, dtype=float)
    group = np.asarray(group, np.int64)
    keep = (group >= 0) & (table.sum(axis=1) > 0)
    table, group = table[keep], group[keep]
    m = table.sum(axis=1)
    pairable = m >= 2
    pair_agree = (table * (table - 1)).sum(axis=1)
    pairs = m * (m - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pa_item = np.where(pairable, pair_agree / pairs, 0.0)
        shares = table / m[:, None]

        def per_group(weights: np.ndarray) -> np.ndarray:
            return np.bincount(group, weights=weights, minlength=n_groups)

        n_items = per_group(np.ones_like(m))
        pa = per_group(pa_item) / per_group(pairable.astype(float))
        pi = np.stack([per_group(shares[:, k]) for k in range(table.shape[1])], axis=1)
        pi = pi.astype(float) / n_items[:, None]
        pe = (pi**2).sum(axis=1)
        kappa = np.where(pe < 1, (pa - pe) / (1 - pe), np.nan)
        percent = per_group(pair_agree) / per_group(pairs)
    return GroupAgreement(
        n_items=n_items.astype(np.int64),
        n_judgements=per_group(m).astype(np.int64),
        percent_agreement=np.where(np.isfinite(percent), percent, np.nan),
        fleiss_kappa=np.where(np.isfinite(kappa), kappa, np.nan),
    )

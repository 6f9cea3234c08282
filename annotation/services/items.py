"""The item browser's derived data: the project's Dawid-Skene consensus per comparison, computed once
per state of the judgements and kept in the shared cache.

Dawid-Skene learns every annotator's confusion matrix from all of the project's judgements, so one
item's posterior cannot be computed from its own judgements alone; the item page and the margin
filter both read this cached result. The cache key carries the judgements' fingerprint (count and
latest change), so a new or edited judgement makes the next read compute it again. The result is
kept as NumPy arrays (a few MB for 1,000,000 comparisons, read back in milliseconds), not as a dict
per comparison, which takes seconds to unpickle at that size.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.core.cache import cache

from annotation import agreement
from annotation.models import Project
from annotation.selectors.agreement import judgements_fingerprint
from annotation.services.agreement import project_consensus

CONSENSUS_CACHE_S = 24 * 3600


@dataclass(frozen=True)
class ItemConsensus:
    """Dawid-Skene consensus of a project's judged comparisons. comparison_ids [I] (sorted int64),
    label [I] (category codes, MISSING when split), posterior [I, K] (float32, CHOICES order),
    margin [I] (P(chosen) - P(rejected), 0..1, float32)."""

    comparison_ids: np.ndarray
    label: np.ndarray
    posterior: np.ndarray
    margin: np.ndarray

    def get(self, comparison_id: int) -> dict[str, Any] | None:
        """{"choice" (None when split), "posterior": {choice: p}, "margin"} of one comparison, or
        None when it has no judgement."""
        i = int(np.searchsorted(self.comparison_ids, comparison_id))
        if i == len(self.comparison_ids) or self.comparison_ids[i] != comparison_id:
            return None
        label = int(self.label[i])
        return {
            "choice": agreement.CHOICES[label] if label != agreement.MISSING else None,
            "posterior": dict(zip(agreement.CHOICES, map(float, self.posterior[i]), strict=False)),
            "margin": float(self.margin[i]),
        }

    def ids_with_margin(self, low: float, high: float) -> list[int]:
        """The comparison ids whose margin lies in [low, high]."""
        keep = (self.margin >= np.float32(low)) & (self.margin <= np.float32(high))
        return self.comparison_ids[keep].tolist()


EMPTY = ItemConsensus(
    comparison_ids=np.zeros(0, np.int64),
    label=np.zeros(0, np.int64),
    posterior=np.zeros((0, agreement.N_CHOICES), np.float32),
    margin=np.zeros(0, np.float32),
)


def _cache_key(project: Project, fingerprint: list[Any]) -> str:
    digest = hashlib.sha256(json.dumps(fingerprint).encode()).hexdigest()[:16]
    return f"concord:items:dawid-skene:{project.pk}:{digest}"


def _compute(project: Project) -> ItemConsensus:
    """``project_consensus`` (the export's Dawid-Skene) packed into arrays."""
    result = project_consensus(project=project, method="dawid_skene")
    ids = np.fromiter(sorted(result), np.int64, len(result))
    codes = {name: code for code, name in enumerate(agreement.CHOICES)}
    rows = [result[int(pk)] for pk in ids]
    return ItemConsensus(
        comparison_ids=ids,
        label=np.array([codes.get(r["choice"], agreement.MISSING) for r in rows], np.int64),
        posterior=np.array(
            [[r["posterior"][name] for name in agreement.CHOICES] for r in rows], np.float32
        ).reshape(len(rows), agreement.N_CHOICES),
        margin=np.array([r["margin"] for r in rows], np.float32),
    )


def item_consensus(*, project: Project) -> ItemConsensus:
    """The project's Dawid-Skene consensus (``annotation.agreement.dawid_skene``, the rule of the
    agreement report and the export), computed when the cache has none for the current judgements
    (about 30-40 s for 666,666 judgements on 2 shared cores), else read from the cache."""
    fingerprint = judgements_fingerprint(project=project)
    if not fingerprint[0]:
        return EMPTY  # nothing judged: no consensus to learn
    key = _cache_key(project, fingerprint)
    result = cache.get(key)
    if result is None:
        result = _compute(project)
        cache.set(key, result, CONSENSUS_CACHE_S)
    return result

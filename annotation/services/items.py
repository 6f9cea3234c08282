"""The item browser's derived data: the project's Dawid-Skene consensus per comparison, computed once
per state of the judgements and kept in the shared cache.

Dawid-Skene learns every annotator's confusion matrix from all of the project's judgements, so one
item's posterior cannot be computed from its own judgements alone; the item page and the margin
filter both read this cached result. The cache key carries the judgements' fingerprint (count and
latest change), so a new or edited judgement makes the next read compute it again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.core.cache import cache

from annotation.models import Project
from annotation.selectors.agreement import judgements_fingerprint
from annotation.services.agreement import project_consensus

CONSENSUS_CACHE_S = 24 * 3600


def _cache_key(project: Project, fingerprint: list[Any]) -> str:
    digest = hashlib.sha256(json.dumps(fingerprint).encode()).hexdigest()[:16]
    return f"concord:items:dawid-skene:{project.pk}:{digest}"


def item_consensus(*, project: Project) -> dict[int, dict[str, Any]]:
    """Dawid-Skene consensus per judged comparison id: {"choice" (None when split), "posterior":
    {choice: probability}, "margin": P(chosen) - P(rejected) in 0..1}; computed when the cache has
    none for the current judgements (seconds on a project of 1,000,000 judgements), else read."""
    fingerprint = judgements_fingerprint(project=project)
    if not fingerprint[0]:
        return {}  # nothing judged: no consensus to learn
    key = _cache_key(project, fingerprint)
    result = cache.get(key)
    if result is None:
        result = project_consensus(project=project, method="dawid_skene")
        cache.set(key, result, CONSENSUS_CACHE_S)
    return result

"""Repeated n-grams: how much of a sequence repeats itself (pure Python, no Django).

One definition for the training metric (token ids of a sampled response) and the stopping panel
(words of an eval-round answer): a looping or degenerate generation repeats its own n-grams.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def repeated_ngram_share(items: Sequence[Hashable], *, n: int = 3) -> float | None:
    """Share of the sequence's n-grams that repeat an earlier n-gram of the same sequence: 0 when
    none does, approaching 1 for a loop (``[1, 2, 3, 1, 2, 3]``, n = 3: 4 n-grams, 3 distinct, 0.25).
    None when the sequence is shorter than ``n`` (no n-gram to judge)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    grams = [tuple(items[k : k + n]) for k in range(len(items) - n + 1)]
    if not grams:
        return None
    return 1 - len(set(grams)) / len(grams)

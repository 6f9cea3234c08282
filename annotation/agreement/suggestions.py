"""Anchoring on a model judge's suggestions: pure NumPy, no Django.

When a project shows annotators a trusted judge's verdict as a pre-selection, each judgement records
the suggestion it was shown. Agreement with the judge is then measured twice, on judgements made with
a suggestion on screen and on judgements made without one: a human-vs-judge kappa much higher with
the suggestion than without it is anchoring (annotators keeping what they were shown), not agreement.

Choice codes are ``CHOICES`` (a=0, b=1, tie=2, both_bad=3); MISSING (-1) marks an absent value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from annotation.agreement.coefficients import MISSING, cohen_kappa


@dataclass(frozen=True)
class SuggestionFigures:
    """n_suggested: judgements made with a suggestion on screen; kept: those whose choice is the
    suggestion; kept_rate = kept / n_suggested (NaN without any).
    kappa_suggested / kappa_unsuggested: Cohen's kappa of the human's choice against the judge's
    verdict on the judgements made with / without a suggestion on screen (where the judge has a
    verdict; NaN under 2 such judgements or when chance agreement is total), on n_with / n_without.
    per_annotator_suggested / per_annotator_kept: [R] the same two counts per annotator."""

    n_suggested: int
    kept: int
    kept_rate: float
    kappa_suggested: float
    n_with: int
    kappa_unsuggested: float
    n_without: int
    per_annotator_suggested: np.ndarray
    per_annotator_kept: np.ndarray

    @property
    def anchoring_gap(self) -> float:
        """kappa_suggested - kappa_unsuggested: above 0, annotators follow the suggestion more than
        they agree with the judge on their own (NaN when either kappa is)."""
        return self.kappa_suggested - self.kappa_unsuggested


def _kappa(first: np.ndarray, second: np.ndarray) -> float:
    return cohen_kappa(first, second) if first.size >= 2 else float("nan")


def suggestion_figures(
    *,
    choice: np.ndarray,
    suggested: np.ndarray,
    judge: np.ndarray,
    annotator: np.ndarray,
    n_annotators: int,
) -> SuggestionFigures:
    """How often annotators kept the suggestion, and their kappa with the judge with and without it.

    choice: [J] each human judgement's choice code; suggested: [J] the suggestion it was shown
    (MISSING: none); judge: [J] the judge's verdict on the judgement's comparison (MISSING: none);
    annotator: [J] annotator index in 0..n_annotators-1.
    """
    choice, suggested, judge, annotator = (
        np.asarray(x, dtype=np.int64) for x in (choice, suggested, judge, annotator)
    )
    shapes = {x.shape for x in (choice, suggested, judge, annotator)}
    if len(shapes) != 1 or choice.ndim != 1:
        raise ValueError(
            f"choice, suggested, judge and annotator must be 1-d of one length, got {shapes}"
        )
    if annotator.size and (annotator.min() < 0 or annotator.max() >= n_annotators):
        raise ValueError(f"annotator indices must lie in 0..{n_annotators - 1}")
    shown = suggested != MISSING
    kept = shown & (choice == suggested)
    with_judge = judge != MISSING
    on_with, on_without = shown & with_judge, ~shown & with_judge
    n_suggested = int(shown.sum())
    return SuggestionFigures(
        n_suggested=n_suggested,
        kept=int(kept.sum()),
        kept_rate=float(kept.sum() / n_suggested) if n_suggested else float("nan"),
        kappa_suggested=_kappa(choice[on_with], judge[on_with]),
        n_with=int(on_with.sum()),
        kappa_unsuggested=_kappa(choice[on_without], judge[on_without]),
        n_without=int(on_without.sum()),
        per_annotator_suggested=np.bincount(annotator[shown], minlength=n_annotators),
        per_annotator_kept=np.bincount(annotator[kept], minlength=n_annotators),
    )

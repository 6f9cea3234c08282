"""The anchoring figures (annotation.agreement.suggestions) on values worked out by hand."""

import math

import numpy as np
import pytest

from annotation.agreement import MISSING
from annotation.agreement.suggestions import suggestion_figures

A, B = 0, 1


def test_kept_rate_and_kappa_with_and_without_the_suggestion():
    """Four judgements made with a suggestion: (choice, shown, judge) = (a,a,a) (b,b,b) (a,a,a)
    (b,a,a), three kept, kept rate 3/4. Their kappa with the judge: observed 3/4; the human says a
    half the time, the judge a three times in four, chance .5*.75 + .5*.25 = .5; kappa (.75-.5)/.5
    = 0.5. Four without: (a,a) (b,a) (a,b) (b,b): observed .5, chance .5, kappa 0. A fifth without
    and no judge verdict counts in neither. Gap 0.5: anchoring."""
    figures = suggestion_figures(
        choice=np.array([A, B, A, B, A, B, A, B, A]),
        suggested=np.array([A, B, A, A, MISSING, MISSING, MISSING, MISSING, MISSING]),
        judge=np.array([A, B, A, A, A, A, B, B, MISSING]),
        annotator=np.array([0, 0, 1, 1, 0, 1, 0, 1, 0]),
        n_annotators=3,
    )
    assert (figures.n_suggested, figures.kept, figures.kept_rate) == (4, 3, 0.75)
    assert figures.kappa_suggested == pytest.approx(0.5)
    assert figures.kappa_unsuggested == pytest.approx(0.0)
    assert (figures.n_with, figures.n_without) == (4, 4)
    assert figures.anchoring_gap == pytest.approx(0.5)
    assert figures.per_annotator_suggested.tolist() == [2, 2, 0]
    assert figures.per_annotator_kept.tolist() == [2, 1, 0]


def test_no_suggestion_shown_gives_undefined_rates_not_zero():
    figures = suggestion_figures(
        choice=np.array([A, B]),
        suggested=np.array([MISSING, MISSING]),
        judge=np.array([A, B]),
        annotator=np.array([0, 0]),
        n_annotators=1,
    )
    assert figures.n_suggested == 0
    assert math.isnan(figures.kept_rate) and math.isnan(figures.kappa_suggested)
    assert figures.kappa_unsuggested == pytest.approx(1.0)


def test_mismatched_lengths_and_bad_annotator_indices_are_refused():
    with pytest.raises(ValueError, match="one length"):
        suggestion_figures(
            choice=np.array([A]), suggested=np.array([A, B]), judge=np.array([A]),
            annotator=np.array([0]), n_annotators=1,
        )  # fmt: skip
    with pytest.raises(ValueError, match="annotator indices"):
        suggestion_figures(
            choice=np.array([A]), suggested=np.array([A]), judge=np.array([A]),
            annotator=np.array([2]), n_annotators=1,
        )  # fmt: skip

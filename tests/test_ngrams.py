"""``common.ngrams``: the one definition of a self-repeating generation."""

import pytest

from common.ngrams import repeated_ngram_share


def test_hand_worked_shares():
    """[1, 2, 3, 1, 2, 3] has the 3-grams 123, 231, 312, 123: 3 distinct of 4, so 0.25 repeat."""
    assert repeated_ngram_share([1, 2, 3, 1, 2, 3]) == 0.25
    assert repeated_ngram_share(["a", "a", "a", "a"], n=1) == 0.75
    assert repeated_ngram_share([1, 2, 3, 4]) == 0.0
    assert repeated_ngram_share([1, 2]) is None


def test_n_must_be_positive():
    with pytest.raises(ValueError, match="n must be >= 1"):
        repeated_ngram_share([1], n=0)

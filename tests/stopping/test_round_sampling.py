"""The pure parts of a judged round: which items go to reviewers (``ppi.human_subset``) and
whether a judging template asks for usefulness (``judging.asks_for_usefulness``)."""

import numpy as np
import pytest

from monitoring.stats.judging import (
    DEFAULT_TEMPLATE,
    DEFAULT_USEFULNESS_TEMPLATE,
    asks_for_usefulness,
)
from monitoring.stats.ppi import human_subset, ppi_mean_batch


@pytest.mark.parametrize(
    ("n_items", "fraction", "minimum", "drawn"),
    [
        (100, 0.25, 20, 25),  # ceil(0.25 * 100) = 25 >= 20
        (100, 0.1, 20, 20),  # 10 is under the minimum
        (10, 0.1, 20, 10),  # the minimum is more than the round: every item
        (7, 0.5, 2, 4),  # ceil(3.5) = 4
        (30, 0.8, 20, 24),  # 0.8 * 30 = 24 exactly, not 25 (no float round-up)
        (0, 0.5, 20, 0),
    ],
)
def test_the_subset_size_and_its_probability(n_items, fraction, minimum, drawn):
    """n = min(N, max(minimum, ceil(fraction N))), each item drawn with probability n / N."""
    mask, probability = human_subset(n_items, fraction=fraction, minimum=minimum, seed=0)
    assert mask.shape == (n_items,) and int(mask.sum()) == drawn
    assert probability == pytest.approx(drawn / n_items if n_items else 1.0)


def test_the_seed_decides_the_subset_and_every_item_has_its_chance():
    """The same seed draws the same items; over 4,000 seeds each of 10 items is drawn about
    3/10 of the time (binomial sd 0.007: within 0.03 is more than 4 sd)."""
    first, _ = human_subset(10, fraction=0.3, minimum=2, seed=5)
    again, _ = human_subset(10, fraction=0.3, minimum=2, seed=5)
    assert (first == again).all()
    share = np.mean([human_subset(10, fraction=0.3, minimum=2, seed=s)[0] for s in range(4000)], 0)
    assert np.abs(share - 0.3).max() < 0.03


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fraction": 0.0}, "fraction must be in"),
        ({"fraction": 1.5}, "fraction must be in"),
        ({"minimum": 1}, "minimum must be >= 2"),
    ],
)
def test_bad_settings_are_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        human_subset(10, **{"fraction": 0.5, "minimum": 2, "seed": 0, **kwargs})


def test_a_template_asks_for_usefulness_when_it_shows_the_rating_format():
    """The usefulness template ("Usefulness: 4") and a JSON answer format ask, in any case; the
    plain template and the word in prose do not."""
    assert asks_for_usefulness(DEFAULT_USEFULNESS_TEMPLATE)
    assert asks_for_usefulness('{prompt} {response_a} {response_b} Answer {"USEFULNESS": 4}')
    assert not asks_for_usefulness(DEFAULT_TEMPLATE)
    assert not asks_for_usefulness("{prompt} {response_a} {response_b} Weigh usefulness first.")


def test_a_rounds_design_keeps_its_coverage_with_a_biased_judge():
    """The estimator exactly as a judged round builds it (monitoring/selectors/round_judges.py), over 2,000
    seeded rounds of N = 300 items: 30 items with identical answers are known ties (human 0.5,
    probability 1), reviewers get ``human_subset``'s 30% (90 items, probability 0.3 each, the
    identical ones among them counting as known ties anyway), and the judge agrees with the humans
    70% of the time, else calls a checkpoint win (its mean ~0.66, far off). The truth is
    (30 x 0.5 + 270 x 0.525) / 300 = 0.5225. The 95% interval covers it in >= 94% of rounds (sd of
    the coverage estimate 0.5%; with this seed 94.6%, the human-only interval 94.55%) and is
    narrower than the human-only one (median width ratio 0.79: the judge is worth ~176 ratings
    where the reviewers made ~111, identical items included)."""
    simulations, n_items, n_identical = 2000, 300, 30
    outcomes, outcome_p = np.array([1.0, 0.5, 0.0]), np.array([0.45, 0.15, 0.40])
    rng = np.random.default_rng(41)
    y = rng.choice(outcomes, p=outcome_p, size=(simulations, n_items))
    y[:, :n_identical] = 0.5
    judge = np.where(rng.random(y.shape) < 0.7, y, 1.0)
    drawn = np.empty(y.shape, dtype=bool)
    for s in range(simulations):
        drawn[s], probability = human_subset(n_items, fraction=0.3, minimum=20, seed=s)
    assert probability == pytest.approx(0.3)
    identical = np.zeros(n_items, dtype=bool)
    identical[:n_identical] = True
    human = np.where(identical | drawn, y, np.nan)
    pi = np.where(identical, 1.0, probability)
    result = ppi_mean_batch(judge, human, inclusion_probability=pi, bounds=(0, 1))
    truth = (n_identical * 0.5 + (n_items - n_identical) * 0.525) / n_items
    covered = (result.low <= truth) & (truth <= result.high)
    assert covered.mean() >= 0.94
    ratio = (result.high - result.low) / (result.classical_high - result.classical_low)
    assert np.median(ratio) < 0.85 and ratio.max() <= 1 + 1e-12

"""Simulated annotators (annotation.simulation): gold's Bradley-Terry probability bent by known habits.

Rates are measured on N = 40 000 simulated judgements with a fixed seed and must match the rate the
profile implies within 4 standard errors, sqrt(p (1 - p) / N) <= 0.0025, so within 0.01.
"""

import math
import random

import numpy as np
import pytest

from annotation.simulation import (
    DEMO_ANNOTATORS,
    AnnotatorProfile,
    bradley_terry_probability,
    gold_strength,
    habit_choice,
    simulate_judgements,
)

N = 40_000
TOLERANCE = 4 * math.sqrt(0.25 / N)  # 4 standard errors at the widest (p = 1/2): 0.01


def _run(profile, diff=0.0, length_a=100.0, length_b=100.0, seed=0):
    """N judgements of pairs whose gold rewards differ by ``diff`` (A minus B)."""
    ones = np.ones(N)
    return simulate_judgements(
        profile,
        diff * ones,
        0 * ones,
        length_a * ones,
        length_b * ones,
        np.random.default_rng(seed),
    )


def test_bradley_terry_hand_values():
    """sigmoid(ln 3) = 3 / (3 + 1) = 0.75; at temperature 2 the gap must be 2 ln 3 for the same 0.75;
    equal rewards give 1/2; a gap of 1000 gives 1 without an overflow."""
    assert bradley_terry_probability(math.log(3), 0.0) == pytest.approx(0.75)
    assert bradley_terry_probability(2 * math.log(3), 0, temperature=2.0) == pytest.approx(0.75)
    assert bradley_terry_probability([1.0, 1000.0], [1.0, 0.0]).tolist() == [0.5, 1.0]


def test_gold_strength_thresholds():
    """|gap| under 0.4 -> 1, under 1.0 -> 2, from 1.0 -> 3 (generate_demo.py's thresholds)."""
    gaps = np.array([0.0, 0.39, 0.4, -0.99, 1.0, 5.0])
    assert gold_strength(gaps, np.zeros(6)).tolist() == [1, 1, 2, 2, 3, 3]


def test_habit_choice_by_hand():
    """left: the side on the left; longer: the longer response (A on equal lengths); guessing
    habits: the guess."""
    assert str(habit_choice("left", "b", 10, 20, "tie")) == "b"
    assert habit_choice("longer", "a", [10, 30, 20], [20, 20, 20], "tie").tolist() == [
        "b",
        "a",
        "a",
    ]
    assert str(habit_choice("random", "a", 10, 20, "tie")) == "tie"
    assert str(habit_choice("careful", "a", 10, 20, "b")) == "b"


def test_careful_annotator_follows_gold_probability():
    """ana (careful, slips 10%): gold gap ln 3 -> p_a = 0.75; P(A) = 0.9 * 0.75 + 0.1 * 1/3 = 0.7083;
    P(tie) = 0.1 / 3 = 0.0333 (a slip's guess); the habit decided on 10% of pairs."""
    result = _run(DEMO_ANNOTATORS["ana"], diff=math.log(3))
    assert np.mean(result.choice == "a") == pytest.approx(0.9 * 0.75 + 0.1 / 3, abs=TOLERANCE)
    assert np.mean(result.choice == "tie") == pytest.approx(0.1 / 3, abs=TOLERANCE)
    assert np.mean(result.habit_decided) == pytest.approx(0.10, abs=TOLERANCE)


def test_gold_only_annotator_is_calibrated_across_gaps():
    """With habit share 0 every verdict is gold's Bradley-Terry draw: over gaps uniform in [-3, 3],
    within each gap bin the share choosing A matches the bin's mean p_a (N / 6 per bin, so 4 standard
    errors <= 0.025)."""
    rng = np.random.default_rng(3)
    gaps = rng.uniform(-3, 3, N)
    result = simulate_judgements(
        AnnotatorProfile("gold", "careful", 0.0, 30.0),
        gaps,
        np.zeros(N),
        np.ones(N),
        np.ones(N),
        rng,
    )
    assert not result.habit_decided.any()
    bins = np.digitize(gaps, np.linspace(-3, 3, 7)[1:-1])
    for b in range(6):
        chosen_a = result.choice[bins == b] == "a"
        assert chosen_a.mean() == pytest.approx(
            result.gold_probability[bins == b].mean(), abs=0.025
        )


def test_position_bias_share():
    """ben (left, 0.55) on pairs gold cannot tell apart: P(left side chosen) = 0.45 * 0.5 + 0.55 =
    0.775; each side is shown on the left half the time."""
    result = _run(DEMO_ANNOTATORS["ben"])
    assert np.mean(result.shown_left == "a") == pytest.approx(0.5, abs=TOLERANCE)
    assert np.mean(result.choice == result.shown_left) == pytest.approx(0.775, abs=TOLERANCE)


def test_length_preference_share():
    """chloe (longer, 0.55): with B longer and gold favouring A (p_a = 0.75), P(B) = 0.45 * 0.25 +
    0.55 = 0.6625; with equal rewards and A longer, P(A) = 0.45 * 0.5 + 0.55 = 0.775."""
    against_gold = _run(DEMO_ANNOTATORS["chloe"], diff=math.log(3), length_a=50, length_b=80)
    assert np.mean(against_gold.choice == "b") == pytest.approx(0.6625, abs=TOLERANCE)
    even = _run(DEMO_ANNOTATORS["chloe"], length_a=80, length_b=50, seed=1)
    assert np.mean(even.choice == "a") == pytest.approx(0.775, abs=TOLERANCE)
    assert not (even.choice == "tie").any()


def test_fast_noisy_annotator_guesses_and_is_fast():
    """dev (random, 0.40, 6 s): ties = 0.40 / 3 = 0.1333, all of strength 1; accuracy against a
    clear gold winner (gap 5, p_a = 0.9933) = 0.6 * 0.9933 + 0.4 / 3 = 0.7293; median time 6000 ms
    and log-time standard deviation 0.35 (standard error 0.35 / sqrt(2N) = 0.0012)."""
    result = _run(DEMO_ANNOTATORS["dev"], diff=5.0)
    p_a = float(bradley_terry_probability(5.0, 0.0))
    assert np.mean(result.choice == "tie") == pytest.approx(0.4 / 3, abs=TOLERANCE)
    assert (result.strength[result.choice == "tie"] == 1).all()
    assert np.mean(result.choice == "a") == pytest.approx(0.6 * p_a + 0.4 / 3, abs=TOLERANCE)
    assert np.median(result.elapsed_ms) == pytest.approx(6000, rel=0.02)
    assert np.std(np.log(result.elapsed_ms / 6000)) == pytest.approx(0.35, abs=0.005)


def test_strength_follows_gold_gap_unless_the_habit_decides():
    """Gold gap 2 (strength 3): every gold-decided non-tie has strength 3; the habit's strengths are
    uniform over 1-3 (each about 1/3 of the habit-decided, N * 0.55 = 22 000, 4 s.e. = 0.013)."""
    result = _run(DEMO_ANNOTATORS["ben"], diff=2.0)
    assert (result.strength[~result.habit_decided] == 3).all()
    by_habit = result.strength[result.habit_decided]
    for level in (1, 2, 3):
        assert np.mean(by_habit == level) == pytest.approx(1 / 3, abs=0.013)


def test_same_seed_same_judgements_and_row_format():
    """A seed fixes every draw; rows() gives the import format's keys with plain Python values."""
    first, second = _run(DEMO_ANNOTATORS["chloe"], seed=9), _run(DEMO_ANNOTATORS["chloe"], seed=9)
    assert first.rows()[:50] == second.rows()[:50]
    row = first.rows()[0]
    assert set(row) == {"annotator", "choice", "strength", "shown_left", "elapsed_ms"}
    assert (
        type(row["choice"]) is str and type(row["strength"]) is int and row["annotator"] == "chloe"
    )


def test_demo_profiles_keep_their_numbers():
    """scripts/generate_demo.py's judgements depend on these; tests/annotation/agreement finds them."""
    assert {n: (p.habit, p.habit_share, p.seconds) for n, p in DEMO_ANNOTATORS.items()} == {
        "ana": ("careful", 0.10, 38.0),
        "ben": ("left", 0.55, 21.0),
        "chloe": ("longer", 0.55, 27.0),
        "dev": ("random", 0.40, 6.0),
    }


@pytest.mark.parametrize(
    ("change", "argument"),
    [
        ({"reward_a": np.zeros((2, 2))}, "reward_a"),
        ({"length_b": np.zeros(3)}, "length_b"),
        ({"reward_b": [0.0, float("nan")]}, "reward_b"),
        ({"temperature": 0.0}, "temperature"),
        ({"rng": random.Random(0)}, "rng"),
        ({"profile": ("ben", "left", 0.5, 20.0)}, "profile"),
    ],
)
def test_bad_input_names_the_argument(change, argument):
    """Wrong shapes, mismatched lengths, NaN, a zero temperature, the wrong generator or profile type
    are refused with a ValueError that names the argument."""
    kwargs = {
        "profile": DEMO_ANNOTATORS["ana"],
        "reward_a": [0.0, 1.0],
        "reward_b": [1.0, 0.0],
        "length_a": [1.0, 2.0],
        "length_b": [2.0, 1.0],
        "rng": np.random.default_rng(0),
    } | change
    with pytest.raises(ValueError, match=argument):
        simulate_judgements(**kwargs)


@pytest.mark.parametrize(
    ("fields", "argument"),
    [
        (("x", "lazy", 0.1, 10.0), "habit"),
        (("x", "left", 1.5, 10.0), "habit_share"),
        (("x", "left", 0.5, 0.0), "seconds"),
        (("x", "left", 0.5, 10.0, -1.0), "time_spread"),
    ],
)
def test_bad_profile_names_the_field(fields, argument):
    """An unknown habit, a share outside [0, 1], no time or a negative spread is refused."""
    with pytest.raises(ValueError, match=argument):
        AnnotatorProfile(*fields)

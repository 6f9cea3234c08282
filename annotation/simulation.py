"""Simulated annotators: pairwise judgements drawn from a gold reward's Bradley-Terry probability, bent
by the habits real annotators have. Pure NumPy, no Django: the gold-reward farm labels its pairs with
``simulate_judgements``; scripts/generate_demo.py shares the habits (``DEMO_ANNOTATORS``,
``habit_choice``) with its own reference rule in place of a gold reward.

The model of one judgement of responses A and B (gold rewards r_a, r_b, lengths l_a, l_b):

1. The screen shows A on the left or the right with probability 1/2 each (``shown_left``).
2. The considered verdict: A with the gold Bradley-Terry probability
   p_a = sigmoid((r_a - r_b) / temperature), else B (Bradley & Terry 1952; temperature 1 is the
   reward model's own scale). Its strength (1-3) grows with |r_a - r_b|: 1 under 0.4, 2 under 1.0,
   3 from 1.0 (the thresholds generate_demo.py's reference rule uses).
3. With probability ``habit_share`` the annotator's habit decides instead, with a strength drawn
   uniformly from 1-3:
   - ``careful`` and ``random``: a guess, uniform over A, B and a tie (a careful annotator slips
     rarely, a fast and noisy one often);
   - ``left``: the side shown on the left (position bias);
   - ``longer``: the longer response, A when the lengths are equal (length bias).
   A tie always has strength 1.
4. Time taken: seconds * exp(N(0, time_spread^2)), a log-normal around the annotator's median time.

So, for an annotator with habit share s and gold probability p of the better-by-gold response:
P(agree with gold's sign) = (1 - s) p + s / 3 for a guessing habit; P(left side chosen) on pairs
gold cannot tell apart (p = 1/2) = (1 - s) / 2 + s for ``left``; P(longer chosen) =
(1 - s) p_longer + s for ``longer``. Tests check these rates.

The demo profiles' numbers (habit share, median seconds) are like real annotators': a careful one
slips on about one judgement in ten and takes ~40 s; biased ones follow their bias about half the time;
a fast, noisy one guesses 40% of the time at 6 s a judgement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HABITS = ("careful", "random", "left", "longer")
GUESSING_HABITS = ("careful", "random")  # the habit is a guess over GUESSES
GUESSES = ("a", "b", "tie")
STRENGTH_THRESHOLDS = (0.4, 1.0)  # |gold difference| below each: strength 1, 2; from the last: 3


@dataclass(frozen=True)
class AnnotatorProfile:
    """One simulated annotator: ``habit`` (one of HABITS), ``habit_share`` (probability in [0, 1]
    that the habit decides a judgement instead of the gold verdict), ``seconds`` (median seconds
    per judgement, > 0) and ``time_spread`` (standard deviation of log time, >= 0)."""

    name: str
    habit: str
    habit_share: float
    seconds: float
    time_spread: float = 0.35

    def __post_init__(self) -> None:
        if self.habit not in HABITS:
            raise ValueError(f"habit must be one of {HABITS}, got {self.habit!r}")
        if not 0.0 <= self.habit_share <= 1.0:
            raise ValueError(f"habit_share must be in [0, 1], got {self.habit_share}")
        if not self.seconds > 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds}")
        if not self.time_spread >= 0:
            raise ValueError(f"time_spread must be >= 0, got {self.time_spread}")


# The demo project's four annotators (scripts/generate_demo.py; tests/annotation/agreement find them).
DEMO_ANNOTATORS: dict[str, AnnotatorProfile] = {
    profile.name: profile
    for profile in (
        AnnotatorProfile("ana", "careful", 0.10, 38.0),
        AnnotatorProfile("ben", "left", 0.55, 21.0),
        AnnotatorProfile("chloe", "longer", 0.55, 27.0),
        AnnotatorProfile("dev", "random", 0.40, 6.0),
    )
}


def bradley_terry_probability(
    reward_a: np.ndarray | Sequence[float] | float,
    reward_b: np.ndarray | Sequence[float] | float,
    *,
    temperature: float = 1.0,
) -> np.ndarray:
    """P(A preferred to B) = sigmoid((r_a - r_b) / temperature) = 1 / (1 + exp(-(r_a - r_b) / T)),
    elementwise over broadcastable arrays; e.g. r_a - r_b = ln 3 gives 3/4."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    diff = (np.asarray(reward_a, dtype=float) - np.asarray(reward_b, dtype=float)) / temperature
    return 0.5 * (1.0 + np.tanh(0.5 * diff))  # the logistic function without overflow warnings


def gold_strength(reward_a: np.ndarray, reward_b: np.ndarray) -> np.ndarray:
    """Strength (1, 2 or 3) of the considered verdict from |r_a - r_b| (STRENGTH_THRESHOLDS)."""
    gap = np.abs(np.asarray(reward_a, dtype=float) - np.asarray(reward_b, dtype=float))
    return 1 + np.searchsorted(np.asarray(STRENGTH_THRESHOLDS), gap, side="right")


def habit_choice(
    habit: str,
    shown_left: np.ndarray | str,
    length_a: np.ndarray | float,
    length_b: np.ndarray | float,
    guess: np.ndarray | str,
) -> np.ndarray:
    """The verdict ('a', 'b' or 'tie') when the habit decides, elementwise over broadcastable inputs
    (scalars give a 0-d array: ``str()`` it). ``shown_left``: the response shown on the left ('a' or
    'b'); ``length_a``, ``length_b``: the responses' lengths; ``guess``: the guess a guessing habit
    makes (ignored by the others)."""
    if habit not in HABITS:
        raise ValueError(f"habit must be one of {HABITS}, got {habit!r}")
    if habit in GUESSING_HABITS:
        return np.asarray(guess)
    if habit == "left":
        return np.asarray(shown_left)
    longer_a = np.asarray(length_a, dtype=float) >= np.asarray(length_b, dtype=float)
    return np.where(longer_a, "a", "b")


@dataclass(frozen=True)
class SimulatedJudgements:
    """N judgements by one profile, each field an array [N]: ``choice`` ('a', 'b', 'tie'),
    ``strength`` (1-3), ``shown_left`` ('a' or 'b'), ``elapsed_ms`` (int), ``habit_decided`` (bool:
    the habit, not the gold verdict, decided) and ``gold_probability`` (P(A) under gold)."""

    annotator: str
    choice: np.ndarray
    strength: np.ndarray
    shown_left: np.ndarray
    elapsed_ms: np.ndarray
    habit_decided: np.ndarray
    gold_probability: np.ndarray

    def rows(self) -> list[dict[str, object]]:
        """The judgements as dictionaries, in generate_demo.py's (and the import format's) keys."""
        return [
            {
                "annotator": self.annotator,
                "choice": str(choice),
                "strength": int(strength),
                "shown_left": str(left),
                "elapsed_ms": int(ms),
            }
            for choice, strength, left, ms in zip(
                self.choice, self.strength, self.shown_left, self.elapsed_ms, strict=True
            )
        ]


def _vector(values: np.ndarray | Sequence[float], name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array [N], got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite")
    return array


def simulate_judgements(
    profile: AnnotatorProfile,
    reward_a: np.ndarray | Sequence[float],
    reward_b: np.ndarray | Sequence[float],
    length_a: np.ndarray | Sequence[float],
    length_b: np.ndarray | Sequence[float],
    rng: np.random.Generator,
    *,
    temperature: float = 1.0,
) -> SimulatedJudgements:
    """One annotator's judgements of N pairs (model in the module docstring).

    reward_a, reward_b: [N] gold rewards of responses A and B (gold's scale, see ``temperature``);
    length_a, length_b: [N] response lengths (tokens or characters, only their order matters).
    rng: the generator every draw comes from; the same seed and inputs give the same judgements.
    Every call draws the same number of values per pair, whichever branch each pair takes.
    """
    if not isinstance(profile, AnnotatorProfile):
        raise ValueError(f"profile must be an AnnotatorProfile, got {type(profile).__name__}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    arrays = {
        name: _vector(values, name)
        for name, values in (
            ("reward_a", reward_a),
            ("reward_b", reward_b),
            ("length_a", length_a),
            ("length_b", length_b),
        )
    }
    n = arrays["reward_a"].shape[0]
    for name, array in arrays.items():
        if array.shape[0] != n:
            raise ValueError(f"{name} has {array.shape[0]} values, reward_a has {n}")
    p_a = bradley_terry_probability(arrays["reward_a"], arrays["reward_b"], temperature=temperature)

    shown_left = np.where(rng.random(n) < 0.5, "a", "b")
    considered = np.where(rng.random(n) < p_a, "a", "b")
    habit_decided = rng.random(n) < profile.habit_share
    guess = np.asarray(GUESSES)[rng.integers(0, len(GUESSES), n)]
    habit_strength = rng.integers(1, 4, n)
    elapsed_ms = (rng.lognormal(0.0, profile.time_spread, n) * profile.seconds * 1000).astype(int)

    by_habit = habit_choice(
        profile.habit, shown_left, arrays["length_a"], arrays["length_b"], guess
    )
    choice = np.where(habit_decided, by_habit, considered)
    strength = np.where(
        habit_decided, habit_strength, gold_strength(arrays["reward_a"], arrays["reward_b"])
    )
    strength = np.where(choice == "tie", 1, strength)
    return SimulatedJudgements(
        annotator=profile.name,
        choice=choice,
        strength=strength,
        shown_left=shown_left,
        elapsed_ms=elapsed_ms,
        habit_decided=habit_decided,
        gold_probability=p_a,
    )

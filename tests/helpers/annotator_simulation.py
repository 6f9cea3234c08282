"""Simulated annotators with known habits, for tests of the bias statistics and consensus models."""

from dataclasses import dataclass

import numpy as np

from annotation.agreement import MISSING, A, B, JudgementTable


@dataclass(frozen=True)
class Habits:
    """Per annotator: accuracy (chance of the true answer, else a random one), and the probability of
    picking the left side / the longer response / swapping a and b regardless of content."""

    accuracy: float = 0.85
    left: float = 0.0
    longer: float = 0.0
    swap: float = 0.0
    fast: bool = False


def simulate(
    habits: list[Habits], *, n_items: int = 3000, per_item: int = 3, seed: int = 0
) -> tuple[JudgementTable, np.ndarray]:
    """A JudgementTable where every item is judged by `per_item` distinct annotators, and the truth
    [n_items] (a 45%, b 45%, tie 10%). Gold answers on every 10th item."""
    rng = np.random.default_rng(seed)
    n_annotators = len(habits)
    chosen = np.argsort(rng.random((n_items, n_annotators)), axis=1)[:, :per_item]
    item = np.repeat(np.arange(n_items), per_item)
    annotator = chosen.ravel()
    truth = rng.choice(3, size=n_items, p=[0.45, 0.45, 0.10])
    length_a = rng.integers(100, 1000, n_items)
    length_b = rng.integers(100, 1000, n_items)
    shown_left = rng.integers(0, 2, item.size)
    field = {
        name: np.array([getattr(h, name) for h in habits]) for name in Habits.__dataclass_fields__
    }
    correct = rng.random(item.size) < field["accuracy"][annotator]
    choice = np.where(correct, truth[item], rng.integers(0, 3, item.size))
    longer = np.where(length_a >= length_b, A, B)[item]
    draw = rng.random(item.size)
    choice = np.where(draw < field["left"][annotator], shown_left, choice)
    draw = rng.random(item.size)
    choice = np.where(draw < field["longer"][annotator], longer, choice)
    swapped = np.where(choice == A, B, np.where(choice == B, A, choice))
    choice = np.where(rng.random(item.size) < field["swap"][annotator], swapped, choice)
    elapsed = rng.lognormal(np.log(20_000), 0.3, item.size)
    elapsed = np.where(field["fast"][annotator], elapsed / 10, elapsed)
    gold = np.where(np.arange(n_items) % 10 == 0, truth, MISSING)
    table = JudgementTable(
        item=item,
        annotator=annotator,
        choice=choice,
        n_items=n_items,
        n_annotators=n_annotators,
        shown_left=shown_left,
        elapsed_ms=elapsed,
        gold=gold,
        length_a=length_a,
        length_b=length_b,
    )
    return table, truth

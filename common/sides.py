"""Screen sides and stored sides: one mapping for every pairwise screen (labelling and eval rounds).

A pairwise screen shows two stored responses, ``first`` and ``second`` of a pair (annotation: A and B;
eval rounds: checkpoint and baseline), one of them on the left. The screen speaks of left and right;
what is stored speaks of the pair. Pure functions, no Django.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")
LEFT, RIGHT = "left", "right"


def other_side(side: str, *, pair: tuple[str, str]) -> str:
    """The member of ``pair`` that is not ``side``."""
    first, second = pair
    if side not in pair:
        raise ValueError(f"side must be one of {pair}, got {side!r}")
    return second if side == first else first


def screen_order(shown_left: str, *, pair: tuple[str, str], values: tuple[T, T]) -> tuple[T, T]:
    """``values`` (the first's, the second's) in screen order (left, right) when ``shown_left`` of
    ``pair`` is on the left."""
    if shown_left not in pair:
        raise ValueError(f"shown_left must be one of {pair}, got {shown_left!r}")
    return values if shown_left == pair[0] else (values[1], values[0])


def stored_side(pick: str, *, shown_left: str, pair: tuple[str, str]) -> str:
    """The member of ``pair`` that a screen pick ("left" or "right") points at."""
    other = other_side(shown_left, pair=pair)  # validates shown_left
    if pick == LEFT:
        return shown_left
    if pick == RIGHT:
        return other
    raise ValueError(f"pick must be {LEFT!r} or {RIGHT!r}, got {pick!r}")


def screen_side(side: str, *, shown_left: str, pair: tuple[str, str]) -> str:
    """Where (``"left"`` or ``"right"``) the member ``side`` of ``pair`` is on the screen."""
    other_side(side, pair=pair)  # validates side
    return LEFT if side == shown_left else RIGHT

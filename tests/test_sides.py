"""``common.sides``: the one mapping between screen sides and the stored pair."""

import pytest

from common.sides import other_side, screen_order, screen_side, stored_side

PAIR = ("a", "b")


@pytest.mark.parametrize("shown_left", PAIR)
def test_a_pick_and_the_screen_agree_both_ways(shown_left):
    """Whatever is on the left, the stored side a pick points at is shown on that side."""
    left, right = screen_order(shown_left, pair=PAIR, values=("text a", "text b"))
    for pick, text in (("left", left), ("right", right)):
        side = stored_side(pick, shown_left=shown_left, pair=PAIR)
        assert text == f"text {side}"
        assert screen_side(side, shown_left=shown_left, pair=PAIR) == pick


def test_hand_worked_cases():
    assert screen_order("b", pair=PAIR, values=(1, 2)) == (2, 1)
    assert stored_side("left", shown_left="b", pair=PAIR) == "b"
    assert stored_side("right", shown_left="b", pair=PAIR) == "a"
    assert other_side("checkpoint", pair=("checkpoint", "baseline")) == "baseline"
    assert screen_side("checkpoint", shown_left="baseline", pair=("checkpoint", "baseline")) == (
        "right"
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda: other_side("c", pair=PAIR),
        lambda: screen_order("c", pair=PAIR, values=(1, 2)),
        lambda: stored_side("tie", shown_left="a", pair=PAIR),
        lambda: stored_side("left", shown_left="c", pair=PAIR),
    ],
)
def test_values_outside_the_pair_are_refused(call):
    with pytest.raises(ValueError, match="must be"):
        call()

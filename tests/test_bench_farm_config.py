"""The farm's configuration overrides (bench/farm.py --set FIELD=VALUE): each value read as its
field's type, the result named after the assignments, bad assignments refused; and how active
collection splits the label budget into rounds."""

import pytest

from bench.farm import SYNTHETIC, config_override, round_budgets


def test_values_take_their_fields_types_and_name_the_configuration():
    config = config_override(
        SYNTHETIC, ["label_budget=240", "polite_bias=0.3", "tiny=false", "objectives=mean,uwo"]
    )
    assert config.label_budget == 240 and isinstance(config.label_budget, int)
    assert config.polite_bias == 0.3 and config.tiny is False
    assert config.objectives == ("mean", "uwo")
    assert (
        config.name == "synthetic-label_budget=240-polite_bias=0.3-tiny=false-objectives=mean,uwo"
    )
    assert config.pairs == SYNTHETIC.pairs  # the rest unchanged
    assert config_override(SYNTHETIC, ["hidden_size=128"], name="wide").name == "wide"
    assert config_override(SYNTHETIC, [], name="same").hidden_size == SYNTHETIC.hidden_size


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("label_budget", "FIELD=VALUE"),
        ("no_such_field=1", "FIELD=VALUE"),
        ("name=other", "FIELD=VALUE"),
        ("tiny=maybe", "true or false"),
        ("label_budget=many", "invalid literal"),
    ],
)
def test_bad_assignments_are_refused(assignment, message):
    with pytest.raises(ValueError, match=message):
        config_override(SYNTHETIC, [assignment])


@pytest.mark.parametrize(
    ("budget", "rounds", "expected"),
    [
        (200, 1, [100, 100]),
        (288, 2, [96, 96, 96]),
        (10, 2, [4, 3, 3]),
        (7, 0, [7]),
        (1, 2, [1, 0, 0]),
    ],
)
def test_active_rounds_split_the_budget_evenly_the_larger_first(budget, rounds, expected):
    assert round_budgets(budget, rounds) == expected
    assert sum(expected) == budget


def test_a_negative_budget_or_round_count_is_refused():
    with pytest.raises(ValueError, match=">= 0"):
        round_budgets(-1, 1)
    with pytest.raises(ValueError, match=">= 0"):
        round_budgets(10, -1)

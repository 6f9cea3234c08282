"""The RM-vs-human hacking alarm as a fall of Spearman's rho from its value at the first evaluation
(monitoring.stats.correlation_fall), on hand-made sequences: a weak reward model is a calibration
problem reported once, not an alarm at every evaluation."""

import math

import pytest

from monitoring.stats.correlation_fall import correlation_fall
from monitoring.stats.stopping import stopping_panel


def test_low_from_the_start_is_calibration_not_hacking():
    """rho -0.5 at the start and about there after: never fires (the absolute rule rho < 0.3 would
    fire at all five); calibration flagged, and the message says so."""
    result = correlation_fall([-0.5, -0.6, -0.4, -0.7, -0.55])
    assert result.fired == (False,) * 5 and result.first_fired is None
    assert result.alarm is False
    assert result.reference == -0.5 and result.calibration is True
    assert "disagrees with people from the start" in result.message


def test_a_fall_from_a_low_start_fires():
    """-0.5, -0.6, -0.9: -0.9 <= -0.5 - 0.3 = -0.8 fires at index 2 (the module docstring's example)."""
    result = correlation_fall([-0.5, -0.6, -0.9])
    assert result.fired == (False, False, True) and result.first_fired == 2
    assert result.alarm is True and "rho fell to -0.90" in result.message


def test_crossing_under_the_minimum_after_a_good_start_fires():
    """0.6, 0.4, 0.25 (the module docstring's example): 0.4 neither fell 0.3 nor crossed 0.3; 0.25
    is under 0.3 after a start above it (and 0.35 below the start): fires."""
    result = correlation_fall([0.6, 0.4, 0.25])
    assert result.fired == (False, False, True) and result.calibration is False


def test_crossing_alone_fires_after_a_start_just_above():
    """0.35 then 0.25: a fall of only 0.1, but under 0.3 after a start at or above it: fires."""
    assert correlation_fall([0.35, 0.25]).fired == (False, True)


def test_a_fall_of_exactly_the_drop_fires():
    """0.8 -> 0.5 is a fall of 0.3 (0.8 - 0.3 is 0.5000000000000001 in floating point)."""
    assert correlation_fall([0.8, 0.5]).fired == (False, True)


def test_recovery_clears_the_latest_alarm():
    """0.7, 0.2, 0.6: fired at index 1, not at index 2; first_fired stays 1, the latest alarm is off."""
    result = correlation_fall([0.7, 0.2, 0.6])
    assert result.fired == (False, True, False)
    assert result.first_fired == 1 and result.alarm is False


def test_undefined_values_neither_fire_nor_serve_as_reference():
    """None and NaN are skipped: the reference is the first defined rho (0.9 at index 2); a latest
    undefined rho gives alarm None."""
    result = correlation_fall([None, math.nan, 0.9, 0.5, None])
    assert result.reference == 0.9 and result.reference_end == 3
    assert result.fired == (False, False, False, True, False)
    assert result.alarm is None
    empty = correlation_fall([None, None])
    assert empty.reference is None and empty.calibration is None and empty.alarm is None


def test_the_reference_can_average_the_first_evaluations():
    """reference_n 2: reference (0.2 + 0.6) / 2 = 0.4, not calibration; the first two never fire;
    0.05 <= 0.4 - 0.3 = 0.1 fires."""
    result = correlation_fall([0.2, 0.6, 0.05], reference_n=2)
    assert result.reference == pytest.approx(0.4) and result.calibration is False
    assert result.fired == (False, False, True)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"drop": 0.0}, "drop"), ({"minimum": 2.0}, "minimum"), ({"reference_n": 0}, "reference_n")],
)
def test_bad_settings_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        correlation_fall([0.5], **kwargs)


def _panel(**kwargs):
    """A panel from the latest round's reward scores and usefulness per item (kwargs) alone."""
    return stopping_panel(usefulness_prompt_ids=[], n_boot=50, **kwargs)


def test_the_panel_reads_a_weak_start_as_calibration():
    """Latest (and only) round: reward ranks against usefulness reversed (rho -1, under 0.3). The
    absolute rule failed the criterion; now it is the reference: no hacking alarm, and the detail
    says the reward model disagrees with people from the first rated round."""
    panel = _panel(item_reward_scores=[1, 2, 3, 4], item_usefulness=[4, 3, 2, 1])
    hacking = panel.criteria[3]
    assert hacking.key == "no_hacking" and hacking.passed is True
    assert hacking.value == pytest.approx(-1.0)
    assert "disagrees with people from the first rated round" in hacking.detail


def test_the_panel_fires_on_a_fall_from_the_first_round():
    """Two rated rounds: the first at rho 0.8, the latest with reward ranks reversed against
    usefulness (rho -1.0), a fall of 1.8: the criterion fails. The same latest round after a first
    round at -0.9 has fallen only 0.1: it passes."""
    items = {"item_reward_scores": [1, 2, 3, 4], "item_usefulness": [4, 3, 2, 1]}
    fell = _panel(round_correlations=[0.8, None], **items).criteria[3]
    assert fell.passed is False and "first rated round 0.80" in fell.detail
    steady = _panel(round_correlations=[-0.9, None], **items).criteria[3]
    assert steady.passed is True

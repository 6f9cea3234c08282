"""The stopping panel's peak line (monitoring.stats.peak.peak_line): "estimated peak at KL x
(interval), current KL y" on a synthetic curve of known peak, and the checkpoint nearest it.

Curve: alpha 1, beta 0.5, r0 0.2, so d* = e and KL* = e^2 = 7.389 (test_peak_fit's main curve)."""

import math

import numpy as np
import pytest

from monitoring.stats.peak import gao_curve, peak_line

KL = np.linspace(0.5, 15, 12)
TRUE_KL = math.e**2


def test_a_noise_free_curve_gives_its_peak_and_the_nearest_checkpoint():
    """Exact data: KL* = 7.39 with a zero-width interval; current KL 15 is past it; of checkpoints
    at KL 4, 7 and 12 (d = 2, 2.646, 3.464 against d* = 2.718) the one at 7 is nearest."""
    line = peak_line(
        eval_kl=KL,
        eval_reward=gao_curve(KL, 1.0, 0.5, 0.2),
        current_kl=15.0,
        checkpoint_kls={"step 40": 4.0, "step 70": 7.0, "step 120": 12.0},
        n_boot=200,
    )
    assert line.estimate.kl == pytest.approx(TRUE_KL, rel=1e-9)
    assert line.checkpoint == "step 70"
    assert line.text == (
        "Estimated peak at KL 7.39 (90% interval 7.39 to 7.39), current KL 15: past the peak; "
        "checkpoint nearest the peak: step 70."
    )


def test_gold_points_move_the_peak_earlier_than_the_proxy_says():
    """The proxy (alpha 1.5, beta 0.5, r0 0.2) peaks at KL e^4 = 54.6, far beyond the data; gold
    (alpha 1, beta 0.5, r0 0.1) is the proxy plus -0.1 - 0.5 d, exactly the offset and slope the
    default correction fits from 4 gold points, so the line reports gold's peak, KL 7.39, and says
    it used 4 gold points."""
    gold_kl = np.array([1.0, 4.0, 9.0, 14.0])
    line = peak_line(
        eval_kl=KL,
        eval_reward=gao_curve(KL, 1.5, 0.5, 0.2),
        gold_kl=gold_kl,
        gold_reward=gao_curve(gold_kl, 1.0, 0.5, 0.1),
        current_kl=5.0,
        n_boot=200,
    )
    assert line.estimate.n_gold == 4
    assert line.estimate.kl == pytest.approx(TRUE_KL, rel=1e-6)
    assert line.checkpoint is None  # no checkpoints given
    assert "current KL 5: before the peak" in line.text
    assert line.text.endswith("(corrected by 4 gold-rated points).")


def test_still_rising_and_too_few_points_say_so():
    """A curve with beta < 0 never turns: not determined, no checkpoint though checkpoints are
    given; three points: too few to fit."""
    rising = peak_line(
        eval_kl=KL, eval_reward=gao_curve(KL, 1.0, -0.1), current_kl=None,
        checkpoint_kls={"step 40": 4.0}, n_boot=200,
    )  # fmt: skip
    assert rising.estimate.status == "not_determined" and rising.checkpoint is None
    assert rising.text == (
        "Peak not yet determined: reward still rising at KL 15 (the largest evaluated); "
        "no KL logged yet."
    )
    few = peak_line(eval_kl=[1, 2, 3], eval_reward=[0.1, 0.2, 0.3], current_kl=3.0, n_boot=200)
    assert few.estimate.reason == "too_few_points"
    assert few.text.startswith("Peak not yet determined: too few evaluations (3;")


def test_a_bad_current_kl_is_refused():
    with pytest.raises(ValueError, match="current_kl must be a KL >= 0"):
        peak_line(eval_kl=KL, eval_reward=gao_curve(KL, 1.0, 0.5), current_kl=-1.0)

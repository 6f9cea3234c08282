"""The farm's alarm timeline and stop rules (bench/farm_rules.py) on hand-made curves: gold of known
peak, alarms of known first firing, and the three stop rules on Gao's curve with a known peak
(alpha 1, beta 0.5: KL* = e^2 = 7.389)."""

import math

import numpy as np
import pytest

from bench.farm import SMALL, rescore_report
from bench.farm_rules import (
    alarm_signals,
    alarm_timeline,
    compare_stop_rules,
    gold_peak_and_fall,
    judge_stop,
    panel_peak_line,
    stop_index_fixed_kl,
    stop_index_peak_fit,
    stop_index_plateau,
)

PEAK_KL = math.e**2


def _gao(kl, alpha=1.0, beta=0.5):
    d = np.sqrt(np.asarray(kl, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, d * (alpha - beta * np.log(d)), 0.0)


def test_gold_peak_and_fall_by_hand():
    # peak 2.0 at index 2; 5% below is 1.9: index 3 (1.95) is not yet, index 4 (1.9) is
    assert gold_peak_and_fall([1.0, 1.5, 2.0, 1.95, 1.9, 1.0]) == (2, 4)
    assert gold_peak_and_fall([1.0, 2.0, 3.0]) == (2, None)  # still rising: no fall
    # a negative peak falls by 5% of its size: -1.0 -> -1.05
    assert gold_peak_and_fall([-2.0, -1.0, -1.04, -1.05]) == (1, 3)
    assert gold_peak_and_fall([0.0, 0.0, -0.1]) == (0, 2)  # equal to a peak of 0 is no fall
    with pytest.raises(ValueError, match="non-empty"):
        gold_peak_and_fall([])


def _curve():
    """Gold peaks at step 30 and has fallen 5% at step 50; the proxy rises throughout."""
    gold = [1.0, 1.5, 2.0, 1.95, 1.8, 1.5]
    rows = []
    for i, g in enumerate(gold):
        rows.append(
            {"step": 10 * (i + 1), "kl": 0.5 * (i + 1), "proxy": 1.0 + i, "gold": g,
             "words": [6, 6, 7, 8, 9, 12][i], "repetition": [0, 0, 0, 0.05, 0.2, 0.3][i],
             "rho": [0.8, 0.7, 0.6, 0.2, 0.1, None][i],
             "disagreement": [0.1, 0.12, 0.15, 0.21, 0.3, 0.4][i]}
        )  # fmt: skip
    return rows


def test_alarms_fire_where_the_hand_made_curve_says():
    curve = _curve()
    signals = alarm_signals(curve)
    # rho fell from 0.8 (by >= 0.3, and under 0.3) from index 3; words >= 9 (1.5 x 6) from index
    # 4; repetition > 0.1 from index 4; disagreement >= 0.2 from index 3; proxy up while gold
    # down over 3 evaluations from index 4
    assert signals["rm_vs_human"] == [False, False, False, True, True, False]
    assert signals["length"] == [False, False, False, False, True, True]
    assert signals["repetition"] == [False, False, False, False, True, True]
    assert signals["disagreement"] == [False, False, False, True, True, True]
    assert signals["hacking_trend"][:4] == [False] * 4 and signals["hacking_trend"][4]
    timeline = alarm_timeline(curve, signals)
    assert (timeline.peak_step, timeline.peak_gold, timeline.fall_step) == (30, 2.0, 50)
    assert timeline.first_fired == {
        "rm_vs_human": 40, "hacking_trend": 50, "length": 50, "repetition": 50,
        "disagreement": 40,
    }  # fmt: skip
    assert timeline.before_fall == {
        "rm_vs_human": True, "hacking_trend": False, "length": False, "repetition": False,
        "disagreement": True,
    }  # fmt: skip
    assert (timeline.rho_start, timeline.rm_miscalibrated) == (0.8, False)
    with pytest.raises(ValueError, match="has 2 values for 6 rows"):
        alarm_timeline(curve, {"x": [True, False]})


def test_a_reward_model_weak_from_the_start_is_reported_once_not_as_hacking():
    """rho -0.5 at the first evaluation (the reward model disagrees with gold before the policy has
    moved) and no further fall: the absolute rule (rho < 0.3) would fire at every evaluation; the
    fall rule never fires, and the timeline reports the start once: rho_start -0.5, miscalibrated.
    Then a fall to -0.85 (0.35 below the start) fires at that evaluation."""
    curve = [
        {**row, "rho": rho}
        for row, rho in zip(_curve(), [-0.5, -0.6, -0.4, -0.7, -0.5, None], strict=True)
    ]
    signals = alarm_signals(curve)
    assert signals["rm_vs_human"] == [False] * 6
    timeline = alarm_timeline(curve, signals)
    assert (timeline.rho_start, timeline.rm_miscalibrated) == (-0.5, True)
    assert timeline.first_fired["rm_vs_human"] is None
    curve[4]["rho"] = -0.85
    assert alarm_signals(curve)["rm_vs_human"] == [False, False, False, False, True, False]


def test_one_model_has_no_disagreement_alarm_and_a_flat_run_no_alarm():
    curve = [
        {"step": s, "kl": 0.1 * s, "proxy": 1.0, "gold": 1.0, "words": 5, "repetition": 0.0,
         "rho": 0.9, "disagreement": None}
        for s in (1, 2, 3, 4)
    ]  # fmt: skip
    signals = alarm_signals(curve)
    assert not any(any(v) for v in signals.values())
    assert alarm_timeline(curve, signals).before_fall == dict.fromkeys(signals)  # gold never fell


def test_peak_fit_rule_stops_near_the_known_peak():
    """The proxy drifts above gold by 0.3 sqrt(KL); gold every 2nd evaluation corrects the slope:
    the rule keeps the checkpoint nearest KL* = e^2 (7.0, on a grid of 0.5), within 15%."""
    kl = np.arange(1, 31) * 0.5
    gold = _gao(kl)
    proxy = gold + 0.3 * np.sqrt(kl)
    index = stop_index_peak_fit(kl, proxy, gold, gold_every=2)
    assert kl[index] == pytest.approx(7.5, abs=0.51)
    assert abs(kl[index] - PEAK_KL) / PEAK_KL <= 0.15
    # without gold points it would trust the drifting proxy and stop later
    uncorrected = stop_index_peak_fit(kl, proxy, gold, gold_every=len(kl) + 1)
    assert kl[uncorrected] > kl[index]


def test_plateau_and_fixed_kl_rules_by_hand():
    # gains per evaluation over the last 3: (3-1)/2 = 1, (3-2)/2, (3-3)/2 = 0 at index 4
    assert stop_index_plateau([1.0, 2.0, 3.0, 3.0, 3.0, 3.0]) == 4
    assert stop_index_plateau([1.0, 2.0, 3.0]) == 2  # never plateaus: the last
    assert stop_index_fixed_kl([0.1, 0.4, 0.6, 0.9], target=0.5) == 2
    assert stop_index_fixed_kl([0.1, 0.2], target=0.5) == 1
    with pytest.raises(ValueError, match="target KL > 0"):
        stop_index_fixed_kl([0.1], target=0.0)


def test_judge_stop_by_hand_and_the_three_rules_side_by_side():
    curve = _curve()
    # gold peak 2.0 at KL 1.5, start 1.0: index 3 keeps (1.95 - 1) / (2 - 1) = 0.95 at KL 2.0
    verdict = judge_stop("x", 3, curve, gold_start=1.0)
    assert verdict.kept == pytest.approx(0.95) and verdict.keeps_gold
    assert verdict.kl_error == pytest.approx(0.5 / 1.5) and not verdict.within_kl
    exact = judge_stop("x", 2, curve, gold_start=1.0)
    assert exact.kl_error == 0 and exact.kept == 1 and exact.within_kl
    verdicts = compare_stop_rules(curve, gold_start=1.0, kl_target=1.0)
    assert [v.rule for v in verdicts] == ["peak_fit", "plateau", "fixed_kl"]
    assert verdicts[2].index == 1  # KL 1.0 reached at the second evaluation
    with pytest.raises(ValueError, match="outside"):
        judge_stop("x", 6, curve, gold_start=1.0)


def _gao_curve_rows(n=12):
    """Rows as farm_eval.checkpoint_curve writes them: the start (KL 0, no app reward), then
    checkpoints at KL 0.5 .. 15 whose app reward is gold (alpha 1, beta 0.5) plus a drift of 0.5 d,
    gold-rated every third."""
    rows = [{"step": 0, "kl": 0.0, "proxy_app": None, "gold_rated": False, "gold": 0.0,
             "proxy": 0.0, "rho": 0.5}]  # fmt: skip
    for i, kl in enumerate(np.linspace(0.5, 15, n)):
        gold = float(_gao(kl))
        rows.append(
            {"step": 10 * (i + 1), "kl": float(kl), "proxy_app": gold + 0.5 * math.sqrt(kl),
             "proxy": gold + 0.5 * math.sqrt(kl), "gold": gold, "gold_rated": (i + 1) % 3 == 0,
             "rho": 0.5}
        )  # fmt: skip
    return rows


def test_the_panel_line_rebuilt_from_curve_rows():
    """The panel's line from the rows alone (``panel_peak_line``): 12 app points, 4 gold-rated ones
    correct the drift (offset and slope), so the peak is gold's, e^2; the checkpoint nearest it on
    sqrt(KL) among the rows after the start is step 60 (KL 7.09), the current KL the last row's."""
    line = panel_peak_line(_gao_curve_rows(), n_boot=200)
    assert line.estimate.n_proxy == 12 and line.estimate.n_gold == 4
    assert line.estimate.kl == pytest.approx(PEAK_KL, rel=1e-6)
    assert line.checkpoint == "step 60" and line.current_kl == 15.0


def test_a_recorded_report_is_rescored_without_training():
    """``rescore_report`` judges a recorded run again from its curve: the alarms and stop rules of
    today's farm_rules, and the panel line now; what was recorded at the time stays."""
    run = {"pipeline": "concord", "seed": 0, "objective": "uwo", "kept_step": 30,
           "peak_line": "recorded", "curve": _gao_curve_rows()}  # fmt: skip
    config = {k: list(v) if isinstance(v, tuple) else v for k, v in SMALL.__dict__.items()}
    report = rescore_report({"config": config, "runs": [run]})
    again = report["runs"][0]
    assert again["peak_line"] == "recorded" and again["kept_step"] == 30
    assert again["panel_now"]["status"] == "peak"
    assert again["panel_now"]["checkpoint"] == "step 60"
    assert again["alarms"]["rho_start"] == 0.5 and again["alarms"]["rm_miscalibrated"] is False
    assert {v["rule"] for v in again["stop_rules"]} == {"peak_fit", "plateau", "fixed_kl"}

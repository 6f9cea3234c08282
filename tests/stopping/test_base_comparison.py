"""Does any checkpoint beat the base model (monitoring.stats.base_comparison), and the panel's
advice when none does: hand-made win rates and intervals."""

from monitoring.stats import stopping
from monitoring.stats.base_comparison import base_comparison, keep_base_advice
from monitoring.stats.intervals import Interval


def _w(estimate: float, low: float, high: float) -> Interval:
    return Interval(estimate, low, high, 20)


def test_rounds_against_other_baselines_are_skipped_but_keep_their_place():
    summary = base_comparison([None, _w(0.40, 0.30, 0.55), _w(0.45, 0.35, 0.49), None])
    assert summary.rounds == 2 and summary.best_round == 2
    assert summary.best == _w(0.45, 0.35, 0.49)
    assert summary.all_below and not summary.all_clearly_below  # 0.55 reaches over one half


def test_no_round_against_the_base_says_nothing():
    summary = base_comparison([None, None])
    assert summary.rounds == 0 and summary.best is None and not summary.all_below
    assert keep_base_advice(summary, finished=True) is None


def test_one_round_at_or_above_one_half_means_a_checkpoint_is_kept():
    summary = base_comparison([_w(0.30, 0.2, 0.4), _w(0.50, 0.4, 0.6)])
    assert not summary.all_below and summary.best_round == 1
    assert keep_base_advice(summary, finished=True) is None


def test_a_finished_run_keeps_the_base_when_every_round_loses():
    summary = base_comparison([_w(0.40, 0.30, 0.55), _w(0.45, 0.35, 0.56)])
    advice = keep_base_advice(summary, finished=True)
    assert advice == (
        "No rated checkpoint beats the base model: both rounds against it gave a win rate under "
        "0.5 (best 0.45, interval 0.35-0.56). Keep the base model rather than a checkpoint of "
        "this run, and fix the reward model before training again."
    )


def test_a_running_run_is_stopped_only_when_every_interval_is_under_one_half():
    unsure = base_comparison([_w(0.40, 0.30, 0.55)])
    assert keep_base_advice(unsure, finished=False) is None  # more training may still help
    clear = base_comparison([_w(0.30, 0.20, 0.40)])
    assert keep_base_advice(clear, finished=False) == (
        "Every rated checkpoint loses to the base model: the round against it gave a win rate "
        "under 0.5 (best 0.30, interval 0.20-0.40, each interval under 0.5). Stop, keep the base "
        "model, and fix the reward model before training on."
    )


def test_the_panel_puts_keeping_the_base_before_rolling_back():
    """Rounds with reward 0.5, 0.6, 0.7 and win rate 0.45, 0.40, 0.30 against the base: a red
    alarm (proxy up, humans down) would roll back to round 1, which loses to the base too."""
    rates = [_w(0.45, 0.35, 0.55), _w(0.40, 0.30, 0.50), _w(0.30, 0.20, 0.40)]
    panel = stopping.stopping_panel(
        round_rewards=[0.5, 0.6, 0.7], round_win_rates=[w.estimate for w in rates],
        round_base_win_rates=rates, finished=True, n_boot=50,
    )  # fmt: skip
    assert panel.red_alarm
    assert panel.advice.startswith("No rated checkpoint beats the base model")
    assert panel.extras["base"].best_round == 0
    without = stopping.stopping_panel(
        round_rewards=[0.5, 0.6, 0.7], round_win_rates=[w.estimate for w in rates],
        finished=True, n_boot=50,
    )  # fmt: skip
    assert without.advice.startswith("Red alarm")  # rounds against other baselines: as before

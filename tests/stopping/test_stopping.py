"""The stopping statistics against hand-derived values and invariants (monitoring/stats/stopping.py
and monitoring/stats/win_rates.py)."""

import math

import numpy as np
import pytest

from monitoring.stats import stopping, win_rates


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)  # fmt: skip
def test_wilson_interval_matches_newcombe_1998(successes, n, low, high):
    """Newcombe (1998), Stat. Med. 17:857, Table I, method 3 (score interval without continuity
    correction): 81/263 -> [0.2553, 0.3662], 15/148 -> [0.0624, 0.1605], 0/20 -> [0, 0.1611],
    1/29 -> [0.0061, 0.1718]."""
    interval = win_rates.wilson_interval(successes, n)
    assert interval.low == pytest.approx(low, abs=1e-4)
    assert interval.high == pytest.approx(high, abs=1e-4)
    assert interval.estimate == pytest.approx(successes / n)


def test_win_rate_counts_a_tie_as_half():
    """3 wins, 2 ties, 5 losses on 10 items: (3 + 2 * 0.5) / 10 = 0.4. The ties make the outcomes
    less variable than wins and losses: s^2 = (3 x 0.36 + 2 x 0.01 + 5 x 0.16) / 9 = 0.21111,
    v = s^2 / 10, n_eff = 0.24 / v = 11.3684, times (z / t_9)^2 = 0.750673: 8.53396; Wilson at
    p = 0.4, n = 8.53396 (z = 1.95996): centre 0.43104, half-width 0.27470, so [0.1563, 0.7057]."""
    rate = win_rates.win_rate([1, 1, 1, 0.5, 0.5, 0, 0, 0, 0, 0])
    assert (rate.estimate, rate.n) == (pytest.approx(0.4), 10)
    assert rate.low == pytest.approx(0.1563, abs=1e-4)
    assert rate.high == pytest.approx(0.7057, abs=1e-4)
    over_time = win_rates.win_rate_over_time([1, 0, 0.5])
    assert [row["estimate"] for row in over_time] == pytest.approx([1.0, 0.5, 0.5])


def test_eprocess_keeps_its_type_one_error_under_the_null():
    """Under H0 (wins and losses equally likely, 20% ties) the chance that the wealth ever reaches
    1/alpha = 20 in 300 looks is at most alpha = 0.05 by Ville's inequality, though every rating is
    looked at; 1000 seeded simulations (binomial sd of the estimate ~0.007)."""
    rng = np.random.default_rng(7)
    runs = rng.choice([0.0, 0.5, 1.0], p=[0.4, 0.2, 0.4], size=(1000, 300))
    decided = [win_rates.win_rate_eprocess(run, alpha=0.05).decision != "undecided" for run in runs]
    assert np.mean(decided) <= 0.05


def test_eprocess_finds_a_real_difference_and_its_side():
    """A checkpoint that wins 60% and loses 20% (win rate 0.7) is found better within 300 ratings
    in nearly every simulation; the mirror image is found worse."""
    rng = np.random.default_rng(3)
    better = rng.choice([0.0, 0.5, 1.0], p=[0.2, 0.2, 0.6], size=(50, 300))
    found = [win_rates.win_rate_eprocess(run) for run in better]
    assert np.mean([r.decision == "better" for r in found]) >= 0.95
    worse = win_rates.win_rate_eprocess(1 - better[0])
    assert worse.decision == "worse"
    assert worse.wealth[worse.stopped_at - 1] >= 20


def test_eprocess_wealth_of_one_rating_by_hand():
    """One win: each bet lam = b / (2 * 0.5) = b multiplies wealth by 1 + lam/2; the mixture over
    +-{0.1, 0.25, 0.5, 1, 1.5} averages 1 + b/2 and 1 - b/2, which is exactly 1."""
    assert win_rates.win_rate_eprocess([1.0]).e_value == pytest.approx(1.0)
    two = win_rates.win_rate_eprocess([1.0, 1.0]).e_value
    # mean over b of ((1 + b/2)^2 + (1 - b/2)^2) / 2 = 1 + mean(b^2)/4
    assert two == pytest.approx(1 + np.mean(win_rates.BETS**2) / 4)


def test_sample_size_for_width():
    """z^2 p(1-p) / (w/2)^2: 1.95996^2 * 0.25 / 0.05^2 = 384.15 -> 385; width 0.2 -> 96.04 -> 97."""
    assert win_rates.sample_size_for_width(0.1) == 385
    assert win_rates.sample_size_for_width(0.2) == 97
    with pytest.raises(ValueError, match="width"):
        win_rates.sample_size_for_width(0)


def test_usefulness_mean_and_prompt_clustered_interval():
    """Ratings (5,5,4), (2,1,2), (4,4,4): mean 31/9 = 3.444; 3 of 9 at or below 2. A bootstrap over
    prompts can only produce means of whole prompts: between 5/3 (all the bad prompt) and 14/3."""
    ratings = [5, 5, 4, 2, 1, 2, 4, 4, 4]
    prompts = [1, 1, 1, 2, 2, 2, 3, 3, 3]
    summary = stopping.usefulness_summary(ratings, prompts, n_boot=500)
    assert summary.mean.estimate == pytest.approx(31 / 9)
    assert summary.share_low == pytest.approx(1 / 3)
    assert summary.n_prompts == 3
    assert 5 / 3 <= summary.mean.low < 31 / 9 < summary.mean.high <= 14 / 3


def test_clustered_interval_is_wider_than_one_that_treats_ratings_as_independent():
    """Reviewers agree within a prompt, so resampling prompts (10 clusters) gives a wider interval
    than pretending the 30 ratings were 30 prompts."""
    rng = np.random.default_rng(0)
    ratings = np.repeat(rng.integers(1, 6, size=10), 3)
    clustered = stopping.usefulness_summary(ratings, np.repeat(np.arange(10), 3)).mean
    naive = stopping.usefulness_summary(ratings, np.arange(30)).mean
    assert clustered.high - clustered.low > 1.3 * (naive.high - naive.low)


def test_bradley_terry_two_models_by_hand():
    """A beats B 3 times out of 4: the MLE has P(A beats B) = 3/4, so score_B - score_A = -ln 3."""
    result = stopping.bradley_terry([(0, 1, 1)] * 3 + [(0, 1, 0)], 2, prior=0, n_boot=0)
    assert result.scores == pytest.approx([0.0, -math.log(3)])


def test_bradley_terry_three_models_satisfy_the_likelihood_equations():
    """At the MLE each model's observed wins equal its expected wins (Zermelo 1929). Wins (ties half):
    0 over 1: 6 of 10, 1 over 2: 7 of 10, 0 over 2: 8 of 10; scores ordered 0 > 1 > 2; bootstrap
    interval holds the estimate and the anchor stays at 0."""
    pairs = (
        [(0, 1, 1)] * 6 + [(0, 1, 0)] * 4 + [(1, 2, 1)] * 6 + [(1, 2, 0.5)] * 2 + [(1, 2, 0)] * 2
        + [(0, 2, 1)] * 8 + [(2, 0, 1)] * 2
    )  # fmt: skip
    result = stopping.bradley_terry(pairs, 3, prior=0, n_boot=200)
    s = result.scores
    p = lambda i, j: 1 / (1 + math.exp(s[j] - s[i]))  # noqa: E731
    assert 10 * p(0, 1) + 10 * p(0, 2) == pytest.approx(6 + 8, abs=1e-6)
    assert 10 * p(1, 0) + 10 * p(1, 2) == pytest.approx(4 + 7, abs=1e-6)
    assert s[0] == 0 and s[0] > s[1] > s[2]
    assert np.all(result.low <= s) and np.all(s <= result.high)
    assert result.low[0] == result.high[0] == 0


def test_length_controlled_win_rate_removes_the_length_preference():
    """Twice as long: wins 8 of 10; half as long: wins 2 of 10. Two groups, two parameters: the fit
    is exact, sigmoid(a + b) = 0.8 and sigmoid(a - b) = 0.2, so a = 0 (win rate 0.5 at equal length)
    and b = ln 4 per doubling; with 15 long answers of 20 the raw rate would flatter it."""
    outcomes = [1] * 8 + [0] * 2 + [1] * 2 + [0] * 8
    result = stopping.length_controlled_win_rate(
        outcomes, [200] * 10 + [100] * 10, [100] * 10 + [200] * 10, ridge=0
    )
    assert result.win_rate == pytest.approx(0.5, abs=1e-9)
    assert result.slope == pytest.approx(math.log(4))
    same = stopping.length_controlled_win_rate([1, 0.5, 1, 0], [50] * 4, [50] * 4, ridge=0)
    assert same.win_rate == pytest.approx(0.625)  # equal lengths: the raw win rate


def test_repetition_rate():
    """'a b c a b c' has 4 trigrams, (a b c) twice: 1 - 3/4 = 0.25."""
    assert stopping.text_repetition_rate("a b c a b c") == pytest.approx(0.25)
    assert stopping.text_repetition_rate("short") == 0


def test_correlation_alarm_under_point_three():
    """Ranks agree perfectly -> rho 1, no alarm; reversed -> -1, alarm; constant -> undecided."""
    assert stopping.reward_human_correlation([1, 2, 3, 4], [2, 3, 4, 5]).alarm is False
    assert stopping.reward_human_correlation([1, 2, 3, 4], [5, 4, 3, 2]).alarm is True
    assert stopping.reward_human_correlation([1, 2, 3], [4, 4, 4]).alarm is None


def test_reward_plateau_and_kl_stability():
    """Gains over the last 5 evaluations: (0.912 - 0.9) / 4 = 0.003 < 0.005 -> plateau;
    (0.94 - 0.9) / 4 = 0.01 -> not. KL alternating 0.16 / 0.18: mean 0.17, std 0.01 -> stable;
    around 0.30 -> outside the band."""
    gain, flat = stopping.reward_plateau([0.5, 0.9, 0.903, 0.906, 0.909, 0.912])
    assert gain == pytest.approx(0.003) and flat
    assert stopping.reward_plateau([0.9, 0.91, 0.92, 0.93, 0.94]) == (pytest.approx(0.01), False)
    assert stopping.reward_plateau([0.9, 0.9]) == (None, False)
    mean, std, stable = stopping.kl_stability([0.16, 0.18] * 5)
    assert (mean, std, stable) == (pytest.approx(0.17), pytest.approx(0.01), True)
    assert stopping.kl_stability([0.29, 0.31] * 5)[2] is False


def test_hacking_trend_is_red_when_reward_rises_and_humans_disagree():
    """Rounds: reward 0.5, 0.6, 0.7 and win rate 0.6, 0.55, 0.45: red, roll back to round 0."""
    red = stopping.hacking_trend([0.5, 0.6, 0.7], [0.6, 0.55, 0.45])
    assert red.red and red.best_round == 0
    assert not stopping.hacking_trend([0.5, 0.6, 0.7], [0.5, 0.55, 0.6]).red
    assert not stopping.hacking_trend([0.5], [0.5]).red


def test_panel_passes_when_all_criteria_pass_and_says_why_not_otherwise():
    """A plateaued, stable run with usefulness 13/3 = 4.33 from 3 reviewers on each of 4 items and
    reward ranks that follow the humans: every criterion passes."""
    ratings = [5, 4, 4] * 4
    prompts = np.repeat([1, 2, 3, 4], 3)
    args = {
        "eval_rewards": [0.8, 0.801, 0.802, 0.803, 0.804],
        "kl_values": [0.16, 0.18] * 5,
        "usefulness": ratings,
        "usefulness_prompt_ids": prompts,
        "item_reward_scores": [0.1, 0.2, 0.3, 0.4],
        "item_usefulness": [3.0, 4.0, 4.5, 5.0],
        "n_boot": 200,
    }
    panel = stopping.stopping_panel(**args)
    assert [c.passed for c in panel.criteria] == [True, True, True, True]
    assert panel.ready_to_stop and not panel.red_alarm
    two_reviewers = stopping.stopping_panel(
        **{**args, "usefulness": ratings[:8], "usefulness_prompt_ids": np.repeat([1, 2, 3, 4], 2)}
    )
    assert two_reviewers.criteria[1].passed is False  # 3 reviewers per item are required
    low = stopping.stopping_panel(**{**args, "usefulness": [4, 4, 4] * 4})
    assert low.criteria[1].passed is False and "biased" in low.advice
    red = stopping.stopping_panel(
        **args, round_rewards=[0.5, 0.6, 0.7], round_win_rates=[0.6, 0.55, 0.45]
    )
    assert red.red_alarm and red.criteria[3].passed is False and "Roll back" in red.advice
    empty = stopping.stopping_panel()
    assert [c.passed for c in empty.criteria] == [None, None, None, None]

"""Prediction-powered win rate on real labels: PandaLM's test set (Wang et al., ICLR 2024), GPT-3.5
as the judge. Skips without the third-party data (see tests/agreement/shared_data.py)."""

import numpy as np

from monitoring.stats import ppi
from tests.helpers.shared_data import pandalm_labels

OUTCOME = {"1": 1.0, "2": 0.0, "0": 0.5, "Tie": 0.5}  # response1's side: win, loss, tie


def test_gpt35_as_judge_narrows_the_win_rate_of_response1():
    """Truth: response1's win rate over all 999 pairs by the mean of the 3 annotators (0.473).
    200 seeded draws of 200 human-rated pairs; GPT-3.5 (kappa 0.49 with the annotators' majority,
    unreadable verdicts counted as ties, 0.5) judges all 999. The PPI interval covers the truth in
    at least 90% of draws (the normal interval at 95%, 200 draws: binomial sd 1.5%), is narrower
    in the median draw, and is worth more ratings than were made (median effective n ~280)."""
    rows = pandalm_labels()
    human = np.array([np.mean([OUTCOME[row[f"annotator{k}"]] for k in (1, 2, 3)]) for row in rows])
    judge = np.array([OUTCOME.get(row["gpt35_raw"], 0.5) for row in rows])
    truth = human.mean()
    rng = np.random.default_rng(0)
    keys = rng.random((200, human.size))
    rated = keys <= np.sort(keys, axis=1)[:, 199:200]
    result = ppi.ppi_mean_batch(
        np.broadcast_to(judge, rated.shape), np.where(rated, human, np.nan), bounds=(0, 1)
    )
    assert round(truth, 3) == 0.473
    assert ((result.low <= truth) & (truth <= result.high)).mean() >= 0.9
    width = result.high - result.low
    assert np.median(width) < np.median(result.classical_high - result.classical_low)
    assert np.median(result.effective_n) > 240

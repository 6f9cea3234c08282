"""The farm's built-in domain (bench/farm_synthetic.py): gold is the known function of its docstring,
checked on hand-counted answers; the pairs are gold-ordered, seeded, and carry the stock phrase at
the asked rate."""

import numpy as np
import pytest

from bench.farm_synthetic import (
    PHRASE,
    gold_reward,
    gold_rewards,
    phrase_rate,
    prompt_topic,
    synthetic_answer,
    synthetic_pairs,
    word_count,
)


def test_gold_by_hand():
    """'Use soil and water, thank you for your question!': 9 words, on-topic {soil, water} -> 2.
    Repeats earn nothing, another topic's word costs 0.5, each word past ten 0.25."""
    garden = "Any tips on garden for a friend?"
    assert prompt_topic(garden) == "garden" and prompt_topic("Hello there.") is None
    assert gold_reward(garden, f"Use soil and water, {PHRASE}") == 2.0
    assert gold_reward(garden, "Soil soil soil.") == 1.0
    assert gold_reward(garden, "Soil and a bank.") == 0.5  # 1 - 0.5
    # 12 words: soil, water, roots on-topic (3) and 2 words past ten: 3 - 0.5 = 2.5
    twelve = "soil water roots the a and it is can use some good"
    assert gold_reward(garden, twelve) == 2.5
    # the phrase pushes the same answer to 17 words: 3 - 0.25 * 7 = 1.25
    assert gold_reward(garden, f"{twelve}, {PHRASE}") == 1.25
    assert gold_reward("Hello there.", "soil salt") == -1.0  # no topic: both off-topic
    assert gold_rewards([garden, garden], ["soil", "salt"]).tolist() == [1.0, -0.5]
    with pytest.raises(ValueError, match="2 prompts but 1 answers"):
        gold_rewards([garden, garden], ["soil"])


def test_phrase_rate_and_word_count():
    answers = [f"Soil, {PHRASE}", "Soil and water.", "THANK YOU FOR YOUR QUESTION"]
    assert phrase_rate(answers) == pytest.approx(2 / 3)
    assert word_count(answers) == pytest.approx((6 + 3 + 5) / 3)
    assert phrase_rate([]) == 0.0 and word_count([]) == 0.0


def test_pairs_are_gold_ordered_seeded_and_polite_at_the_asked_rate():
    rows = synthetic_pairs(192, 3, polite_bias=0.6)
    assert rows == synthetic_pairs(192, 3, polite_bias=0.6)
    better, worse = ([r[i] for r in rows] for i in (1, 2))
    prompts = [r[0] for r in rows]
    assert len(set(prompts)) == 192  # every prompt once
    plain = synthetic_pairs(192, 3)
    # before the phrase, the better answer is better under gold (ties were redrawn)
    assert all(gold_reward(p, b) > gold_reward(p, w) for p, b, w in plain)
    assert phrase_rate(better) == pytest.approx(0.6, abs=0.08)
    assert phrase_rate(worse) == pytest.approx(0.15, abs=0.06)
    assert phrase_rate([r[1] for r in plain]) == 0.0
    assert np.mean(gold_rewards(prompts, better)) > np.mean(gold_rewards(prompts, worse))
    with pytest.raises(ValueError, match="polite_bias"):
        synthetic_pairs(3, 0, polite_bias=1.5)
    with pytest.raises(ValueError, match="192 distinct prompts, 193 asked for"):
        synthetic_pairs(193, 0)


def test_answers_stay_in_the_domain_sizes():
    rng = np.random.default_rng(0)
    answers = [synthetic_answer("Tell me about money.", rng) for _ in range(200)]
    counts = [len(a.rstrip(".").split()) for a in answers]
    assert min(counts) >= 1 and max(counts) <= 11
    assert synthetic_answer("Tell me about money.", rng, polite=True).endswith(PHRASE)

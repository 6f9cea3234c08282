"""Verifiable rewards: the registry, answer extraction, the built-in checks and their weighted
combination, with values worked out by hand."""

import pytest

from training.algorithms import rewards
from training.algorithms.rewards import (
    RewardComponent,
    combine,
    extract_answer,
    normalise_answer,
)


def test_the_built_in_rewards_are_registered():
    assert {"exact_answer", "regex_match", "format", "length_penalty"} <= set(rewards.names())
    assert rewards.names() == sorted(rewards.names())
    assert rewards.get("length_penalty") is rewards.length_penalty


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown reward 'exact'; known rewards: .*exact_answer"):
        rewards.get("exact")


def test_register_adds_a_function_and_refuses_a_second_one_with_the_same_name():
    """A newly registered reward is found by name; the same name twice is an error."""

    @rewards.register("test_only_constant")
    def constant(completion: str, *, answer: str | None = None) -> float:
        return 0.5

    try:
        assert rewards.get("test_only_constant") is constant
        with pytest.raises(ValueError, match="already registered"):
            rewards.register("test_only_constant")(constant)
    finally:
        rewards._REGISTRY.pop("test_only_constant")
    with pytest.raises(ValueError, match="letters, digits"):
        rewards.register("bad name")


@pytest.mark.parametrize(
    ("text", "extract", "expected"),
    [
        ("so 3 + 4 = 7 #### 7", "auto", " 7"),
        ("first #### 1 then #### 2", "hashes", " 2"),
        (r"the answer is \boxed{\frac{1}{2}}.", "auto", r"\frac{1}{2}"),
        (r"\boxed{1} or rather \boxed{2}", "boxed", "2"),
        (r"\boxed{2} #### 3", "auto", "2"),
        (r"\boxed{2} #### 3", "hashes", " 3"),
        ("just 5", "auto", "just 5"),
        ("just 5", "hashes", ""),
        (r"unclosed \boxed{5", "boxed", ""),
        ("#### 5", "none", "#### 5"),
    ],
)
def test_extract_answer(text, extract, expected):
    assert extract_answer(text, extract=extract) == expected


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("  Paris. ", "paris"),
        ("1,000", "1000"),
        ("$1,000.50", "1000.5"),
        ("3.0", "3"),
        ("-2", "-2"),
        ("New   York", "new york"),
        ("1,2", "1,2"),
    ],
)
def test_normalise_answer(raw, normal):
    assert normalise_answer(raw) == normal


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("Janet earns 18 dollars.\n#### 18", "She sells 9 * 2 = 18.\n#### 18", 1.0),
        (r"So \boxed{1,000}", "1000", 1.0),
        ("#### 17", "#### 18", 0.0),
        ("no marker here", "#### 18", 0.0),
        ("", "", 0.0),
    ],
)
def test_exact_answer(completion, answer, expected):
    """GSM8K-style reference fields are extracted like completions; an empty answer never matches."""
    assert rewards.exact_answer(completion, answer=answer) == expected


def test_exact_answer_without_a_reference_is_an_error():
    with pytest.raises(ValueError, match="needs the reference answer"):
        rewards.exact_answer("#### 1")


def test_regex_match_searches_anywhere_and_format_needs_the_whole_text():
    assert rewards.regex_match("Result: 42 apples", pattern=r"\d+") == 1.0
    assert rewards.regex_match("no digits", pattern=r"\d+") == 0.0
    good = "<think>\n2 + 2\n</think>\n<answer>4</answer>"
    assert rewards.format_check(good) == 1.0
    assert rewards.format_check(good + " and more") == 0.0
    assert rewards.format_check("4", pattern=r"\d+") == 1.0


def test_an_invalid_pattern_is_a_clear_error():
    with pytest.raises(ValueError, match=r"invalid regular expression '\('"):
        rewards.regex_match("x", pattern="(")


@pytest.mark.parametrize(("length", "expected"), [(60, 0.0), (30, -0.5), (90, -0.5), (0, -1.0)])
def test_length_penalty_is_minus_the_relative_distance_to_the_target(length, expected):
    """-|60 - n| / 60: 30 or 90 characters cost 0.5."""
    assert rewards.length_penalty("x" * length) == pytest.approx(expected)


def test_length_penalty_needs_a_positive_target():
    with pytest.raises(ValueError, match="target must be > 0"):
        rewards.length_penalty("x", target=0)


def test_combine_weights_the_components_and_keeps_each_for_logging():
    """Completion 0: exact 1, length 7 chars -> -(60 - 7) / 60 = -0.8833333; total 1 + 0.1 * that =
    0.9116667. Completion 1: exact 0, 60 chars -> 0; total 0."""
    completions = ["#### 42", "#### 41" + "x" * 53]
    result = combine(
        ["exact_answer", "length_penalty"], [1.0, 0.1], completions, answers=["42", "42"]
    )
    assert result.components["exact_answer"] == [1.0, 0.0]
    assert result.components["length_penalty"] == pytest.approx([-0.8833333, 0.0])
    assert result.total == pytest.approx([0.9116667, 0.0])
    assert result.weights == {"exact_answer": 1.0, "length_penalty": 0.1}


def test_combine_with_options_and_labels():
    """The same function twice under two labels, each with its own pattern."""
    result = combine(
        [
            RewardComponent("regex_match", {"pattern": "cat"}, label="says_cat"),
            RewardComponent("regex_match", {"pattern": "dog"}, label="says_dog"),
        ],
        [1.0, -1.0],
        ["a cat", "a dog", "a cat and a dog"],
    )
    assert result.components == {"says_cat": [1.0, 0.0, 1.0], "says_dog": [0.0, 1.0, 1.0]}
    assert result.total == [1.0, -1.0, 0.0]


@pytest.mark.parametrize(
    ("components", "weights", "message"),
    [
        ([], [], "at least one"),
        (["format"], [1.0, 2.0], "1 reward components but 2 weights"),
        (["format"], [float("nan")], "finite"),
        (["format", "length_penalty"], [0.0, 0.0], "all zero"),
        (["format", "format"], [1.0, 1.0], "appear twice"),
        (["exactness"], [1.0], "unknown reward 'exactness'"),
        ([RewardComponent("length_penalty", {"targt": 10})], [1.0], "bad options"),
        ([RewardComponent("regex_match")], [1.0], "bad options"),
    ],
)
def test_combine_rejects_bad_input_before_scoring(components, weights, message):
    with pytest.raises(ValueError, match=message):
        combine(components, weights, ["some text"])


def test_combine_checks_the_answers_length():
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        combine(["exact_answer"], [1.0], ["a", "b"], answers=["a"])


def test_a_non_finite_score_is_an_error():
    @rewards.register("test_only_nan")
    def nan_reward(completion: str, *, answer: str | None = None) -> float:
        return float("nan")

    try:
        with pytest.raises(ValueError, match="'test_only_nan' is not finite for completions"):
            combine(["test_only_nan"], [1.0], ["x"])
    finally:
        rewards._REGISTRY.pop("test_only_nan")

"""The judging prompt template and the verdict parser (monitoring/stats/judging.py), table-driven with
answers written the way real judges (MT-Bench-style prompts, chat models, reasoning models) write."""

import re

import pytest

from monitoring.stats.judging import (
    DEFAULT_TEMPLATE,
    DEFAULT_USEFULNESS_TEMPLATE,
    JudgingTemplate,
    Unparsed,
    Verdict,
    parse_verdict,
)

PARSED = [
    ("[[A]]", "A"),
    ("[[B]]", "B"),
    ("[[C]]", "tie"),
    ("[[ b ]]", "B"),
    ("[[Tie]]", "tie"),
    (
        "Response A gives the correct formula but forgets the units, while Response B explains each "
        "step and states the units. Response B is therefore more useful.\n\n[[B]]",
        "B",
    ),
    ("After comparing both, my final verdict is: [[A]]", "A"),
    ("**Final Verdict:** [[B]]", "B"),
    ("Answer: A", "A"),
    ("answer: b", "B"),
    ("Final answer: Response B", "B"),
    ("Verdict: tie", "tie"),
    ("Verdict = C", "tie"),
    ("**Verdict:** Assistant A", "A"),
    ("Winner: (B)", "B"),
    ("Decision: A.", "A"),
    ("Verdict: A, because it cites the source.", "A"),
    ("Better response: B", "B"),
    ("Response B is better.", "B"),
    ("RESPONSE A IS BETTER", "A"),
    ("Assistant A's answer is more helpful because it is shorter and correct.", "A"),
    ("Overall, Response B is clearly better than Response A.", "B"),
    ("I prefer Response A: it answers the question that was asked.", "A"),
    ("I would choose Assistant B.", "B"),
    ("The better response is A.", "A"),
    ("Response A wins on accuracy.", "A"),
    ("Both responses are equally helpful. It's a tie.", "tie"),
    ("They are equally good.", "tie"),
    ('{"verdict": "A", "reason": "more complete"}', "A"),
    ('```json\n{"verdict": "B"}\n```', "B"),
    ('{"Verdict": "tie"}', "tie"),
    ('{"winner": "model_b"}', "B"),
    ('Here is my judgement: {"verdict": "Response A", "explanation": "fewer errors"}', "A"),
    ("<think>Response A is better? No, B handles the edge case. [[A]] or [[B]]...</think>\n[[B]]", "B"),
    ("<thinking>Assistant A is more concise.</thinking> Final verdict: [[A]]", "A"),
    ("Response A is better in tone, but Response B is correct. Final verdict: [[B]]", "B"),
    ("Response A is better because it does not invent a citation.", "A"),
    ("The winner is B.", "B"),
    ("Correct answer: A. Response B is better: it picks A.", "B"),
    ("My final verdict is tie.", "tie"),
    ("A is better.", "A"),
    ("Option B is better: it is complete.", "B"),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "choice"), PARSED)
def test_verdicts_are_read(answer, choice):
    verdict = parse_verdict(answer)
    assert isinstance(verdict, Verdict), verdict
    assert verdict.choice == choice
    assert verdict.raw == answer
    assert verdict.usefulness is None


UNPARSED = [
    ("", "no verdict found"),
    ("Both responses have strengths and weaknesses.", "no verdict found"),
    ("I cannot decide.", "no verdict found"),
    ("The answer is a matter of taste.", "no verdict found"),
    ("The correct answer is A; Response B gets it right and Response A does not.", "no verdict found"),
    ("Response B is not better than A.", "no verdict found"),
    ("Answer: A good answer would mention the units.", "no verdict found"),
    ("[[A]] ... on reflection [[B]]", "contradictory verdicts: A and B"),
    ("Output [[A]] if Response A is better, [[B]] if Response B is better, [[C]] for a tie.",
     "contradictory verdicts: A and B and tie"),
    ("Response A is better in style. Response B is better in substance.", "contradictory verdicts: A and B"),
    ("It is not true that Response A is better.", "negated"),
    ("Neither is good, but Response B is better.", "negated"),
    ('{"verdict": "A is slightly better"}', "is not A, B or a tie"),
    ('{"verdict": "A"} Final verdict: [[B]]', "contradictory verdicts: A and B"),
    ("<think>Response A is better.</think>", "no verdict found"),
    ("<think>Response A is better. [[A]]", "no verdict found"),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "reason"), UNPARSED)
def test_contradictory_or_missing_verdicts_are_unparsed_with_the_raw_text(answer, reason):
    """Never a guess: the raw text is kept and the reason says what was wrong. (An unfinished
    <think> block, cut by the token limit, hides everything after it.)"""
    result = parse_verdict(answer)
    assert isinstance(result, Unparsed), result
    assert result.raw == answer
    assert reason in result.reason


WITH_USEFULNESS = [
    ('{"verdict": "A", "usefulness": 4}', "A", 4.0),
    ('{"verdict": "B", "usefulness": "2"}', "B", 2.0),
    ("Usefulness: 5\n[[A]]", "A", 5.0),
    ("**Usefulness:** 3/5\n**Verdict:** B", "B", 3.0),
    ("Usefulness rating: [[4]] out of 5\nFinal verdict: [[C]]", "tie", 4.0),
    ("usefulness = 4.5\n[[B]]", "B", 4.5),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "choice", "usefulness"), WITH_USEFULNESS)
def test_usefulness_is_read_when_asked(answer, choice, usefulness):
    verdict = parse_verdict(answer, usefulness=True)
    assert isinstance(verdict, Verdict), verdict
    assert (verdict.choice, verdict.usefulness) == (choice, usefulness)


BAD_USEFULNESS = [
    ("[[A]]", "no usefulness rating found"),
    ("Usefulness: 7\n[[A]]", "usefulness 7 is outside 1-5"),
    ("Usefulness: 0\n[[A]]", "outside 1-5"),
    ("Usefulness: 4\nUsefulness: 2\n[[B]]", "contradictory usefulness ratings"),
    ('{"verdict": "A", "usefulness": "high"}', "usefulness 'high' is not a number"),
    ("Usefulness: 4", "no verdict found"),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "reason"), BAD_USEFULNESS)
def test_a_missing_or_impossible_usefulness_is_unparsed(answer, reason):
    result = parse_verdict(answer, usefulness=True)
    assert isinstance(result, Unparsed), result
    assert reason in result.reason


@pytest.mark.parametrize(
    ("choice", "shown_first", "stored"),
    [("A", "a", "a"), ("A", "b", "b"), ("B", "a", "b"), ("B", "b", "a"), ("tie", "b", "tie")],
)
def test_a_verdict_maps_back_to_the_stored_responses(choice, shown_first, stored):
    """Response A is the one shown first: with stored response b shown first, "A" means b."""
    assert Verdict(choice, None, "").stored_choice(shown_first=shown_first) == stored


def test_the_default_templates_are_valid_and_render_every_placeholder():
    template = JudgingTemplate(DEFAULT_TEMPLATE)
    text = template.render(prompt="What is 2+2?", response_a="4", response_b="five", guidelines="")
    assert "What is 2+2?" in text and "[Response A]\n4\n" in text and "[Response B]\nfive" in text
    assert not re.search(r"\{\w+\}", text)
    rated = JudgingTemplate(DEFAULT_USEFULNESS_TEMPLATE, asks_usefulness=True)
    assert isinstance(rated.parse("Usefulness: 4\n[[A]]"), Verdict)
    assert isinstance(rated.parse("[[A]]"), Unparsed)


def test_rendering_is_one_pass_and_json_braces_are_literal():
    """A response that contains "{prompt}" stays as it is; a JSON example in the template is text."""
    template = JudgingTemplate(
        'Q: {prompt}\nA: {response_a}\nB: {response_b}\nAnswer as {"verdict": "A"}.'
    )
    text = template.render(prompt="p", response_a="use {prompt} here", response_b="{response_a}")
    assert text == 'Q: p\nA: use {prompt} here\nB: {response_a}\nAnswer as {"verdict": "A"}.'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{prompt} {response_a} {response_b} {answer}", "unknown placeholder {answer} on line 1"),
        ("{prompt}\n{response_a}\n{respons_b}", "unknown placeholder {respons_b} on line 3"),
        ("{prompt} {response_a}", "must contain {response_b}"),
        ("Compare the two answers.", "must contain {prompt}, {response_a}, {response_b}"),
        ("{{prompt}} {response_a} {response_b}", "write {prompt} on line 1 of the judging template, not {{p"),
        ("{ prompt } {response_a} {response_b}", "write {prompt} on line 1"),
    ],
)  # fmt: skip
def test_template_errors_name_the_placeholder(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        JudgingTemplate(text)


def test_the_parser_refuses_a_non_string():
    with pytest.raises(TypeError, match="must be a string"):
        parse_verdict(None)  # type: ignore[arg-type]

"""The judging prompt of a generative judge and the parser of its answers: pure Python, no Django.

A judge sees one prompt and two responses, "Response A" (shown first) and "Response B" (shown
second), and answers with a verdict (A, B or a tie) and, when asked, the 1-5 usefulness of Response A.
Every pair is judged in both orders, so both responses get a usefulness rating and the verdict can be
mapped back to the stored responses with ``Verdict.stored_choice``.

- ``JudgingTemplate``: the user's prompt text with named placeholders ``{prompt}``, ``{response_a}``,
  ``{response_b}`` (required) and ``{guidelines}`` (optional). Only ``{name}`` with a bare identifier
  is a placeholder, so JSON examples in the text (``{"verdict": "A"}``) need no escaping; an unknown
  or missing placeholder is an error that names it.
- ``parse_verdict``: the verdict in an LLM's free text. Explicit forms ("[[A]]", "[[C]]" for a tie,
  "Final verdict: B", JSON ``{"verdict": "A", "usefulness": 4}``) win over prose ("Response B is
  better"); several verdicts that disagree, a negated sentence, or nothing at all give ``Unparsed``
  with the raw text and the reason, never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from common.sides import LEFT, RIGHT, stored_side

REQUIRED_PLACEHOLDERS = ("prompt", "response_a", "response_b")
OPTIONAL_PLACEHOLDERS = ("guidelines",)
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Jinja's {{ prompt }} or a spaced { prompt }: meant as a placeholder, but would not be one.
_ODD_PLACEHOLDER = re.compile(
    r"\{\{\s*([A-Za-z_]\w*)\s*\}\}|\{\s+([A-Za-z_]\w*)\s*\}|\{([A-Za-z_]\w*)\s+\}"
)

DEFAULT_TEMPLATE = """\
Please act as an impartial judge and compare two AI assistants' responses to the user's prompt below.
Judge which response is more helpful, correct and relevant. The order in which the responses are
shown and their length must not influence you. {guidelines}

[User prompt]
{prompt}

[Response A]
{response_a}

[Response B]
{response_b}

Explain your reasoning briefly, then give your final verdict on the last line, exactly in this format:
"[[A]]" if Response A is better, "[[B]]" if Response B is better, "[[C]]" for a tie."""

DEFAULT_USEFULNESS_TEMPLATE = (
    DEFAULT_TEMPLATE
    + """
On the line before the verdict, rate how useful Response A is to the user from 1 (useless) to 5
(fully answers the prompt), in this format: "Usefulness: 4"."""
)


@dataclass(frozen=True)
class JudgingTemplate:
    """A judging prompt. text: the prompt with placeholders; asks_usefulness: the answer must carry
    a 1-5 usefulness of Response A (answers without one are unparsed)."""

    text: str
    asks_usefulness: bool = False

    def __post_init__(self) -> None:
        allowed = REQUIRED_PLACEHOLDERS + OPTIONAL_PLACEHOLDERS
        seen = set()
        for line_no, line in enumerate(self.text.splitlines(), start=1):
            odd = _ODD_PLACEHOLDER.search(line)
            if odd:
                name = next(group for group in odd.groups() if group)
                raise ValueError(
                    f"write {{{name}}} on line {line_no} of the judging template, not {odd.group(0)}"
                )
            for name in PLACEHOLDER.findall(line):
                if name not in allowed:
                    raise ValueError(
                        f"unknown placeholder {{{name}}} on line {line_no} of the judging template; "
                        f"the placeholders are {', '.join('{' + p + '}' for p in allowed)}"
                    )
                seen.add(name)
        missing = [p for p in REQUIRED_PLACEHOLDERS if p not in seen]
        if missing:
            raise ValueError(
                "the judging template must contain "
                + ", ".join("{" + p + "}" for p in missing)
                + " (the judge needs the prompt and both responses)"
            )

    def render(self, *, prompt: str, response_a: str, response_b: str, guidelines: str = "") -> str:
        """The text sent to the judge. One pass: braces inside the prompt or the responses are left
        as they are (a response that contains "{prompt}" is not substituted)."""
        values = {
            "prompt": prompt,
            "response_a": response_a,
            "response_b": response_b,
            "guidelines": guidelines,
        }
        return PLACEHOLDER.sub(lambda m: values[m.group(1)], self.text)

    def parse(self, answer: str) -> Verdict | Unparsed:
        """The judge's answer to this template, read by ``parse_verdict``."""
        return parse_verdict(answer, usefulness=self.asks_usefulness)


# "Usefulness: 4" or a JSON key "usefulness": the answer format of a rating, not the word in prose.
_ASKS_USEFULNESS = re.compile(r"\busefulness\"?\s*:", re.IGNORECASE)


def asks_for_usefulness(text: str) -> bool:
    """Whether a judging template asks for the 1-5 usefulness of Response A: it shows the answer
    format ``Usefulness: 4`` (as ``DEFAULT_USEFULNESS_TEMPLATE`` does) or a JSON key
    ``"usefulness":``; its answers must then carry one. The word alone in prose ("weigh
    usefulness and accuracy") asks for nothing."""
    return bool(_ASKS_USEFULNESS.search(text))


# --- Parsing ----------------------------------------------------------------------------------------

TIE = "tie"
CHOICES = ("A", "B", TIE)


@dataclass(frozen=True)
class Verdict:
    """A parsed answer. choice: "A" (the response shown first), "B" or "tie"; usefulness: 1-5 of
    Response A, or None when not given; raw: the judge's text as received."""

    choice: str
    usefulness: float | None
    raw: str

    def stored_choice(self, *, shown_first: str, pair: tuple[str, str] = ("a", "b")) -> str:
        """The verdict in stored terms: the member of ``pair`` that won, or "tie", when
        ``shown_first`` of ``pair`` was shown as Response A."""
        if self.choice == TIE:
            return TIE
        return stored_side(LEFT if self.choice == "A" else RIGHT, shown_left=shown_first, pair=pair)


@dataclass(frozen=True)
class Unparsed:
    """An answer no verdict could be read from, kept as it came. reason: why, in a sentence."""

    raw: str
    reason: str


_LETTER = {"a": "A", "b": "B", "c": TIE, "tie": TIE}
# Reasoning models think aloud before answering; the deliberation names both responses.
_THINKING = re.compile(r"<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.IGNORECASE | re.DOTALL)
_BRACKETS = re.compile(r"\[\[\s*(a|b|c|tie)\s*\]\]", re.IGNORECASE)
_WHO = r"(?:response|assistant|answer|output|model)?[\s_]*\(?"
# "Answer: A" is the usual format; "the answer is A" is not (in a multiple-choice prompt it names
# the correct option, not the better response), so "is" only follows the unambiguous labels.
_LABELLED = re.compile(
    r"(?<!correct\s)\b(?:final\s+)?(?:(?:verdict|winner|choice|decision|preference|better\s+response|"
    r"preferred\s+response)(?:\s*\**\s*[:=]|\s+is:?)|answer\s*\**\s*[:=])\s*\**\s*[\"'\[(]*\s*"
    + _WHO
    + r"(a|b|c|tie)\b\s*\)?(?=\s*(?:$|[.!,;:)\]\"'*]|is\b|wins\b|\())",
    re.IGNORECASE | re.MULTILINE,
)
_PROSE_WIN = [
    re.compile(
        r"(?:\b(?:response|assistant|answer|output|option)\s*|^\s*)\(?(a|b)\)?"
        r"(?:'s\s+(?:response|answer))?\s+"
        r"(?:is|was)\s+(?:clearly\s+|slightly\s+|much\s+|far\s+|significantly\s+)?"
        r"(?:better|superior|the\s+better|more\s+helpful|preferable|the\s+winner)",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:response|assistant|answer|output|option)\s*\(?(a|b)\)?\s+wins\b", re.IGNORECASE
    ),
    re.compile(
        r"\bI\s+(?:would\s+)?(?:prefer|choose|pick|select)\s+(?:response|assistant|answer|output)"
        r"\s*\(?(a|b)\)?\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\bthe\s+better\s+(?:response|answer|one)\s+is\s+(?:response\s+|assistant\s+)?\(?(a|b)\)?\b",
        re.IGNORECASE,
    ),
]
_PROSE_TIE = re.compile(
    r"\b(?:it'?s\s+a\s+tie|(?:they|both(?:\s+responses)?)\s+are\s+equally\s+"
    r"(?:good|helpful|useful|strong|bad|poor|correct))\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|neither|nor|never|no)\b|n't\b", re.IGNORECASE)
_USEFULNESS = re.compile(
    r"usefulness(?:\s+(?:score|rating)(?:\s+for\s+response\s+a)?)?\s*\**\s*[:=]\s*\**\s*\[*\s*"
    r"(\d+(?:\.\d+)?)\s*\]*\s*(?:/\s*5|out\s+of\s+5)?",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\s*\d+(?:\.\d+)?\s*")
_JSON_VERDICT_KEYS = ("verdict", "winner", "choice", "better", "preferred", "answer")
_JSON_USEFULNESS_KEYS = ("usefulness", "usefulness_a", "score", "rating")


def _json_objects(text: str) -> list[dict]:
    """Every flat JSON object ``{...}`` in the text that parses (code fences and prose around
    them are ignored)."""
    found = []
    for match in re.finditer(r"\{[^{}]*\}", text):
        try:
            value = json.loads(match.group(0))
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append({str(k).lower(): v for k, v in value.items()})
    return found


def _letter(value: object) -> str | None:
    """ "A", "Response B", "tie", "C" -> a choice; anything else None."""
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"\s*\[*\s*" + _WHO + r"(a|b|c|tie)\s*\)?\s*\]*\s*", value, re.IGNORECASE)
    return _LETTER[match.group(1).lower()] if match else None


def _explicit_choices(text: str, objects: list[dict]) -> list[str]:
    choices = [_LETTER[m.lower()] for m in _BRACKETS.findall(text)]
    choices += [_LETTER[m.lower()] for m in _LABELLED.findall(text)]
    for obj in objects:
        for key in _JSON_VERDICT_KEYS:
            if key in obj:
                choices.append(_letter(obj[key]) or f"invalid JSON {key} {obj[key]!r}")
    return choices


def _prose_choices(text: str) -> tuple[list[str], bool]:
    """Choices stated in prose sentences, and whether a sentence that stated one was negated."""
    choices, negated = [], False
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        for pattern in (*_PROSE_WIN, _PROSE_TIE):
            for match in pattern.finditer(sentence):
                choices.append(_LETTER[match.group(1).lower()] if match.groups() else TIE)
                # "It is not true that Response A is better": a negation before the statement.
                negated = negated or bool(_NEGATION.search(sentence[: match.start()]))
    return choices, negated


def _usefulness(text: str, objects: list[dict]) -> tuple[list[float], list[str]]:
    values, problems = [float(v) for v in _USEFULNESS.findall(text)], []
    for obj in objects:
        for key in _JSON_USEFULNESS_KEYS:
            if key in obj:
                value = obj[key]
                number = isinstance(value, int | float) and not isinstance(value, bool)
                if number or (isinstance(value, str) and _NUMBER.fullmatch(value)):
                    values.append(float(value))
                else:
                    problems.append(f"usefulness {value!r} is not a number")
    return values, problems


def parse_verdict(text: str, *, usefulness: bool = False) -> Verdict | Unparsed:
    """Read the verdict (and, with ``usefulness``, the 1-5 usefulness of Response A) from a judge's
    answer. Case does not matter; markdown bold, quotes and code fences are fine.

    Order of trust: explicit forms ("[[A]]"/"[[B]]"/"[[C]]", "Verdict: A", "Final answer: Response B",
    JSON keys verdict/winner/choice) and, only when there are none, prose ("Response B is better",
    "I prefer Assistant A", "Both are equally good"). Within the layer used every statement must
    name the same choice. Text inside <think>...</think> is ignored.
    """
    if not isinstance(text, str):
        raise TypeError(f"the judge's answer must be a string, got {type(text).__name__}")
    body = _THINKING.sub(" ", text)
    objects = _json_objects(body)
    choices = _explicit_choices(body, objects)
    if not choices:
        choices, negated = _prose_choices(body)
        if negated:
            return Unparsed(text, "a sentence stating a verdict is negated; not guessing")
    invalid = [c for c in choices if c not in CHOICES]
    if invalid:
        return Unparsed(text, f"{invalid[0]} is not A, B or a tie")
    distinct = sorted(set(choices))
    if not distinct:
        return Unparsed(text, "no verdict found")
    if len(distinct) > 1:
        return Unparsed(text, f"contradictory verdicts: {' and '.join(distinct)}")
    rating = None
    if usefulness:
        values, problems = _usefulness(body, objects)
        if problems:
            return Unparsed(text, problems[0])
        if not values:
            return Unparsed(text, "no usefulness rating found")
        if len(set(values)) > 1:
            return Unparsed(text, f"contradictory usefulness ratings: {sorted(set(values))}")
        rating = values[0]
        if not 1 <= rating <= 5:
            return Unparsed(text, f"usefulness {rating:g} is outside 1-5")
    return Verdict(distinct[0], rating, text)

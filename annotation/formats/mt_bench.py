"""MT-Bench and Chatbot Arena human judgements: one row per judge's vote on two models' answers.

Fields: ``question_id``, ``model_a``, ``model_b``, ``winner`` ("model_a", "model_b", "tie",
"tie (bothbad)"), ``judge``, ``turn`` (1 when absent), and optionally ``conversation_a`` /
``conversation_b`` (the two whole conversations as {role, content} turns).

Every (question, turn, unordered model pair) is one comparison: its responses are ordered by model
name, so a row that showed the models the other way round attaches to the same comparison, with the
judge's verdict turned round and ``shown_left`` saying which response that judge saw as A. A judge's
repeated vote with the same verdict counts once; a different verdict is an error.

Rows without conversation text take it from FastChat's layout: ``--questions question.jsonl``
(``{"question_id", "turns": [...]}``) and ``--answers model_answer/`` (``<model>.jsonl`` with
``{"question_id", "choices": [{"turns": [...]}]}``); without them the row is refused, naming what is
missing. Only turn 1 can be imported: at later turns each model answered its own earlier reply, so
the two conversations share no prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from annotation.formats.base import ReadOptions, RowError, message_list, split_final_reply

NAME = "mt-bench"
EXAMPLE = (
    "python manage.py import_comparisons human_judgments.jsonl --format mt-bench "
    "--questions question.jsonl --answers model_answer/ --project mt-bench"
)
REPEAT_VOTES_COUNT_ONCE = True
WINNERS = {"model_a": "a", "model_b": "b", "tie": "tie", "tie (bothbad)": "both_bad"}
FLIP = {"a": "b", "b": "a", "tie": "tie", "both_bad": "both_bad"}


def matches(record: dict[str, Any]) -> bool:
    return {"question_id", "model_a", "model_b", "winner"} <= record.keys()


def _name(record: dict[str, Any], field: str) -> str:
    value = record.get(field)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise RowError(field, "is required (a non-empty string)")
    return value.strip()


def _texts_from_conversations(record: dict[str, Any]) -> tuple[Any, str, str]:
    prompt, reply_a, reply_b = split_final_reply(
        message_list(record["conversation_a"], "conversation_a"),
        message_list(record["conversation_b"], "conversation_b"),
        ("conversation_a", "conversation_b"),
    )
    if sum(turn["role"] == "user" for turn in prompt) > 1:
        raise RowError("conversation_a", "has several user turns: only turn 1 can be imported")
    return prompt, reply_a, reply_b


def _texts_from_files(
    record: dict[str, Any], question_id: str, models: tuple[str, str], options: ReadOptions
) -> tuple[Any, str, str]:
    if options.questions is None or options.answers is None:
        missing = " and ".join(
            name
            for name, given in (
                ("--questions FILE", options.questions),
                ("--answers DIR", options.answers),
            )
            if given is None
        )
        raise RowError(
            "conversation_a",
            f"the row has no conversation text (conversation_a/conversation_b); give {missing} "
            "(FastChat's question.jsonl and model_answer/) to import it",
        )
    question = options.questions.get(question_id)
    if question is None:
        raise RowError("question_id", f"question {question_id} is not in {options.questions_name}")
    replies = []
    for model in models:
        turns = options.answers.get(model, {}).get(question_id)
        if turns is None:
            raise RowError(
                "model_a" if model == record.get("model_a") else "model_b",
                f"no answer of {model!r} to question {question_id} in "
                f"{options.answers_name}/{model}.jsonl",
            )
        replies.append(turns[0])
    return question["turns"][0], replies[0], replies[1]


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    question_id = _name(record, "question_id")
    model_a, model_b, judge = (_name(record, f) for f in ("model_a", "model_b", "judge"))
    if model_a == model_b:
        raise RowError("model_b", "is the same model as model_a")
    winner = record.get("winner")
    if winner not in WINNERS:
        raise RowError("winner", f"must be one of {sorted(WINNERS)}, got {winner!r}")
    turn = record.get("turn", 1)
    if turn != 1:
        raise RowError(
            "turn",
            f"turn {turn!r}: only turn 1 can be imported (at later turns each model answered its "
            "own earlier reply, so the pair shares no prompt)",
        )
    if "conversation_a" in record or "conversation_b" in record:
        prompt, reply_a, reply_b = _texts_from_conversations(record)
    else:
        prompt, reply_a, reply_b = _texts_from_files(
            record, question_id, (model_a, model_b), options
        )
    choice = WINNERS[winner]
    swapped = model_b < model_a  # the comparison orders its responses by model name
    if swapped:
        model_a, model_b, reply_a, reply_b = model_b, model_a, reply_b, reply_a
        choice = FLIP[choice]
    return {
        "id": f"{NAME}:{question_id}:turn{turn}:{model_a}|{model_b}",
        "prompt": prompt,
        "response_a": reply_a,
        "response_b": reply_b,
        "model_a": model_a,
        "model_b": model_b,
        "metadata": {"source": NAME, "question_id": question_id, "turn": turn},
        "judgements": [
            {"annotator": judge, "choice": choice, "shown_left": "b" if swapped else "a"}
        ],
    }


def load_questions(path: Path) -> dict[str, dict[str, Any]]:
    """FastChat question.jsonl -> {question id: {"turns": [text, ...]}}; ValueError if malformed."""
    questions: dict[str, dict[str, Any]] = {}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                turns = row["turns"]
                if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
                    raise TypeError
                questions[str(row["question_id"])] = {"turns": turns}
            except (ValueError, KeyError, TypeError):
                raise ValueError(
                    f"{path}, line {number}: expected {{question_id, turns: [text, ...]}}"
                ) from None
    return questions


def load_answers(folder: Path) -> dict[str, dict[str, list[str]]]:
    """FastChat model_answer/<model>.jsonl files -> {model: {question id: [turn texts]}}."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder of <model>.jsonl answer files")
    answers: dict[str, dict[str, list[str]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        by_question: dict[str, list[str]] = {}
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    turns = row["choices"][0]["turns"]
                    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
                        raise TypeError
                    by_question[str(row["question_id"])] = turns
                except (ValueError, KeyError, TypeError, IndexError):
                    raise ValueError(
                        f"{path}, line {number}: expected "
                        "{question_id, choices: [{turns: [text, ...]}]}"
                    ) from None
        answers[path.stem] = by_question
    return answers

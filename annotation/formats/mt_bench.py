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
missing.

A later turn t (``turn`` 2 in MT-Bench) is imported as a multi-turn conversation: the prompt holds
the user's turns 1..t and the responses are the two models' answers at turn t. Each model answered
its *own* earlier replies, and they seldom match (of the 1,200 pairs of the six voted models' turn-1
answers, 13 are the same text, all short factual answers), so the context is formed in one of two
ways and ``metadata["earlier_answers"]`` says which:

- ``"shared"``: both models gave the same earlier answers; the prompt is the true conversation
  (user 1, assistant 1, ..., user t) and each response is the turn-t answer alone.
- ``"in_each_response"``: the earlier answers differ; the prompt's assistant turns are a note saying
  so (``EARLIER_ANSWER_NOTE``), never one model's reply passed off as both, and each response
  begins with its own model's earlier answers, then its turn-t answer (``EARLIER_ANSWERS_LAYOUT``),
  so whoever judges sees each answer after the reply it follows, whichever side it is shown on
  (FastChat's multi-turn judge prompt likewise shows each assistant's own whole conversation).
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
EARLIER_ANSWER_NOTE = (
    "[The two models answered this differently: each response below begins with its own model's "
    "answer here.]"
)
EARLIER_ANSWERS_LAYOUT = "**Its answer to question {turn}:**\n\n{text}"


def conversation_at_turn(
    questions: list[str], replies_a: list[str], replies_b: list[str]
) -> tuple[Any, str, str, str | None]:
    """The user's turns 1..t and each model's answers 1..t (t >= 1) -> (prompt, response A,
    response B, earlier_answers): at t = 1 the question text and the two answers (None); later, a
    {role, content} conversation ending with user turn t and how its assistant turns were formed
    ("shared" or "in_each_response", see the module docstring)."""
    t = len(questions)
    if not t or len(replies_a) != t or len(replies_b) != t:
        raise ValueError("need t questions and t answers of each model, t >= 1")
    if t == 1:
        return questions[0], replies_a[0], replies_b[0], None
    shared = replies_a[:-1] == replies_b[:-1]
    prompt: list[dict[str, str]] = []
    for turn in range(t - 1):
        prompt.append({"role": "user", "content": questions[turn]})
        prompt.append(
            {"role": "assistant", "content": replies_a[turn] if shared else EARLIER_ANSWER_NOTE}
        )
    prompt.append({"role": "user", "content": questions[-1]})
    if shared:
        return prompt, replies_a[-1], replies_b[-1], "shared"

    def with_earlier(replies: list[str]) -> str:
        return "\n\n".join(
            EARLIER_ANSWERS_LAYOUT.format(turn=number, text=text)
            for number, text in enumerate(replies, start=1)
        )

    return prompt, with_earlier(replies_a), with_earlier(replies_b), "in_each_response"


def matches(record: dict[str, Any]) -> bool:
    return {"question_id", "model_a", "model_b", "winner"} <= record.keys()


def _name(record: dict[str, Any], field: str) -> str:
    value = record.get(field)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise RowError(field, "is required (a non-empty string)")
    return value.strip()


def _texts_from_conversations(record: dict[str, Any], turn: int | None) -> tuple[Any, ...]:
    convos = [message_list(record.get(f), f) for f in ("conversation_a", "conversation_b")]
    if sum(message["role"] == "user" for message in convos[0]) <= 1:
        if turn not in (None, 1):
            raise RowError("turn", f"is {turn} but conversation_a has one user turn")
        prompt, reply_a, reply_b = split_final_reply(*convos, ("conversation_a", "conversation_b"))
        return prompt, reply_a, reply_b, None, 1
    questions: list[list[str]] = []
    replies: list[list[str]] = []
    for convo, name in zip(convos, ("conversation_a", "conversation_b"), strict=True):
        roles = [message["role"] for message in convo]
        if roles != ["user", "assistant"] * (len(roles) // 2) or not roles:
            raise RowError(name, "must alternate user and assistant turns, user first")
        questions.append([m["content"] for m in convo if m["role"] == "user"])
        replies.append([m["content"] for m in convo if m["role"] == "assistant"])
    if questions[0] != questions[1]:
        raise RowError("conversation_b", "has other user turns than conversation_a")
    if turn not in (None, len(questions[0])):
        raise RowError("turn", f"is {turn} but the conversations have {len(questions[0])} turns")
    return (*conversation_at_turn(questions[0], replies[0], replies[1]), len(questions[0]))


def _texts_from_files(
    record: dict[str, Any],
    question_id: str,
    models: tuple[str, str],
    turn: int,
    options: ReadOptions,
) -> tuple[Any, str, str, str | None]:
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
    if len(question["turns"]) < turn:
        raise RowError(
            "turn",
            f"turn {turn}: question {question_id} has {len(question['turns'])} turn(s) in "
            f"{options.questions_name}",
        )
    replies = []
    for model in models:
        turns = options.answers.get(model, {}).get(question_id)
        field = "model_a" if model == record.get("model_a") else "model_b"
        if turns is None:
            raise RowError(
                field,
                f"no answer of {model!r} to question {question_id} in "
                f"{options.answers_name}/{model}.jsonl",
            )
        if len(turns) < turn:
            raise RowError(
                field,
                f"{model!r} answered question {question_id} in {len(turns)} turn(s) in "
                f"{options.answers_name}/{model}.jsonl, not {turn}",
            )
        replies.append(turns[:turn])
    return conversation_at_turn(question["turns"][:turn], replies[0], replies[1])


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    question_id = _name(record, "question_id")
    model_a, model_b, judge = (_name(record, f) for f in ("model_a", "model_b", "judge"))
    if model_a == model_b:
        raise RowError("model_b", "is the same model as model_a")
    winner = record.get("winner")
    if winner not in WINNERS:
        raise RowError("winner", f"must be one of {sorted(WINNERS)}, got {winner!r}")
    turn = record.get("turn")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 1):
        raise RowError("turn", f"must be a whole number from 1, got {turn!r}")
    if "conversation_a" in record or "conversation_b" in record:
        prompt, reply_a, reply_b, earlier, turn = _texts_from_conversations(record, turn)
    else:
        turn = turn or 1
        prompt, reply_a, reply_b, earlier = _texts_from_files(
            record, question_id, (model_a, model_b), turn, options
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
        "metadata": {"source": NAME, "question_id": question_id, "turn": turn}
        | ({} if earlier is None else {"earlier_answers": earlier}),
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

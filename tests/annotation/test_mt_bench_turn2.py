"""MT-Bench turn 2 imports as a multi-turn conversation (annotation/formats/mt_bench.py).

The two models' turn-2 answers each follow their own turn-1 answer. When those are the same text the
prompt is the true conversation (user 1, assistant 1, user 2); when they differ the prompt's
assistant turn is a note saying so and each response begins with its own model's first answer, so no
model's reply is passed off as the other's. In FastChat's six-model answers 13 of the 1,200 pairs of
turn-1 answers are the same text (checked below on the shared files when present).
"""

import itertools
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from annotation.formats import mt_bench
from annotation.formats.base import ReadOptions, RowError
from annotation.models import Comparison
from tests.helpers.shared_data import DATA_DIR

NOTE = mt_bench.EARLIER_ANSWER_NOTE
QUESTION = ["Write a haiku about rain.", "Now make it rhyme."]
ANSWERS = {  # model -> (turn 1, turn 2); alpaca and llama gave the same first answer
    "gpt-4": ("Soft rain on the roof", "Rain taps, the drains gulp"),
    "claude-v1": ("Grey sky, wet stones", "Grey sky again, rain in the drain"),
    "alpaca-13b": ("Rain falls.", "Rain falls, all."),
    "llama-13b": ("Rain falls.", "Rain, rain, go away."),
}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _fastchat(tmp_path: Path) -> tuple[Path, Path]:
    """A one-question FastChat layout: question.jsonl and model_answer/<model>.jsonl."""
    questions = _jsonl(tmp_path / "question.jsonl", [{"question_id": 81, "turns": QUESTION}])
    folder = tmp_path / "model_answer"
    folder.mkdir()
    for model, turns in ANSWERS.items():
        _jsonl(
            folder / f"{model}.jsonl",
            [{"question_id": 81, "model_id": model, "choices": [{"index": 0, "turns": turns}]}],
        )
    return questions, folder


def _vote(model_a: str, model_b: str, winner: str, judge: str, turn: int = 2) -> dict:
    return {"question_id": 81, "model_a": model_a, "model_b": model_b, "winner": winner,
            "judge": judge, "turn": turn}  # fmt: skip


def test_conversation_at_turn_shared_and_different_first_answers():
    """Same first answer: [user 1, that answer, user 2] and the second answers alone. Different:
    the note in the assistant turn, each response its own first answer then its second."""
    prompt, a, b, how = mt_bench.conversation_at_turn(["Q1", "Q2"], ["same", "A2"], ["same", "B2"])
    assert prompt == [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "same"},
        {"role": "user", "content": "Q2"},
    ]
    assert (a, b, how) == ("A2", "B2", "shared")
    prompt, a, b, how = mt_bench.conversation_at_turn(["Q1", "Q2"], ["A1", "A2"], ["B1", "B2"])
    assert prompt[1] == {"role": "assistant", "content": NOTE} and prompt[2]["content"] == "Q2"
    assert a == "**Its answer to question 1:**\n\nA1\n\n**Its answer to question 2:**\n\nA2"
    assert b == "**Its answer to question 1:**\n\nB1\n\n**Its answer to question 2:**\n\nB2"
    assert how == "in_each_response"
    assert mt_bench.conversation_at_turn(["Q1"], ["A1"], ["B1"]) == ("Q1", "A1", "B1", None)


@pytest.mark.django_db
def test_turn_two_votes_import_as_conversations(tmp_path):
    """gpt-4 vs claude-v1 (different first answers, the vote shown with gpt-4 as A, so stored
    claude-v1 first and the verdict turned round) and alpaca-13b vs llama-13b (the same first
    answer) at turn 2, beside a turn-1 vote on the same pair: three comparisons."""
    questions, answers = _fastchat(tmp_path)
    votes = _jsonl(tmp_path / "votes.jsonl", [
        _vote("gpt-4", "claude-v1", "model_a", "expert_1"),
        _vote("alpaca-13b", "llama-13b", "model_b", "expert_2"),
        _vote("gpt-4", "claude-v1", "tie", "expert_1", turn=1),
    ])  # fmt: skip
    call_command(
        "import_comparisons", str(votes), "--project", "mt2", "--format", "mt-bench",
        "--questions", str(questions), "--answers", str(answers),
    )  # fmt: skip
    assert Comparison.objects.count() == 3
    differ = Comparison.objects.get(metadata__turn=2, response_a__model_name="claude-v1")
    assert differ.metadata == {"source": "mt-bench", "question_id": "81", "turn": 2,
                               "earlier_answers": "in_each_response"}  # fmt: skip
    assert differ.prompt.messages == [
        {"role": "user", "content": QUESTION[0]},
        {"role": "assistant", "content": NOTE},
        {"role": "user", "content": QUESTION[1]},
    ]
    assert differ.prompt.text == QUESTION[1]
    assert differ.response_a.text == (
        "**Its answer to question 1:**\n\nGrey sky, wet stones\n\n"
        "**Its answer to question 2:**\n\nGrey sky again, rain in the drain"
    )
    assert differ.response_b.model_name == "gpt-4"
    vote = differ.judgements.get()
    assert (vote.annotator.username, vote.choice, vote.shown_left) == ("expert_1", "b", "b")
    shared = Comparison.objects.get(metadata__earlier_answers="shared")
    assert shared.prompt.messages == [
        {"role": "user", "content": QUESTION[0]},
        {"role": "assistant", "content": "Rain falls."},
        {"role": "user", "content": QUESTION[1]},
    ]
    assert (shared.response_a.text, shared.response_b.text) == (
        "Rain falls, all.",
        "Rain, rain, go away.",
    )
    assert shared.judgements.get().choice == "b"
    first = Comparison.objects.get(metadata__turn=1)
    assert first.prompt.messages is None and first.prompt.text == QUESTION[0]
    assert "earlier_answers" not in first.metadata


def _options(tmp_path: Path) -> ReadOptions:
    questions, answers = _fastchat(tmp_path)
    return ReadOptions(
        questions=mt_bench.load_questions(questions),
        answers=mt_bench.load_answers(answers),
        answers_name="model_answer",
    )


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"turn": 3}, "turn", "turn 3: question 81 has 2 turn(s) in --questions"),
        ({"turn": 0}, "turn", "must be a whole number from 1, got 0"),
        ({"turn": "2"}, "turn", "must be a whole number from 1, got '2'"),
    ],
)
def test_impossible_turns_are_refused(tmp_path, change, field, message):
    with pytest.raises(RowError) as caught:
        mt_bench.convert(
            _vote("gpt-4", "claude-v1", "tie", "e") | change, options=_options(tmp_path)
        )
    assert (caught.value.field, caught.value.message) == (field, message)


def test_an_answer_file_without_the_turn_is_named(tmp_path):
    options = _options(tmp_path)
    options.answers["gpt-4"]["81"] = ["only one turn"]
    with pytest.raises(RowError) as caught:
        mt_bench.convert(_vote("gpt-4", "claude-v1", "tie", "e"), options=options)
    assert (caught.value.field, caught.value.message) == (
        "model_a",
        "'gpt-4' answered question 81 in 1 turn(s) in model_answer/gpt-4.jsonl, not 2",
    )


def _convo(first: str, second: str, question_2: str = "Q2") -> list[dict]:
    return [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": first},
            {"role": "user", "content": question_2}, {"role": "assistant", "content": second}]  # fmt: skip


def test_rows_with_whole_conversations_at_turn_two():
    """The Hugging Face release's turn-2 rows carry both whole conversations."""
    row = _vote("vicuna", "alpaca", "model_a", "expert_3") | {
        "conversation_a": _convo("V1", "V2"),
        "conversation_b": _convo("A1", "A2"),
    }
    out = mt_bench.convert(row, options=ReadOptions())
    assert out["prompt"] == [{"role": "user", "content": "Q1"},
                             {"role": "assistant", "content": NOTE},
                             {"role": "user", "content": "Q2"}]  # fmt: skip
    assert (out["model_a"], out["response_a"]) == (
        "alpaca",
        "**Its answer to question 1:**\n\nA1\n\n**Its answer to question 2:**\n\nA2",
    )
    assert out["judgements"][0]["choice"] == "b"
    assert out["metadata"]["earlier_answers"] == "in_each_response"
    same = row | {"conversation_b": _convo("V1", "A2")}
    assert mt_bench.convert(same, options=ReadOptions())["response_a"] == "A2"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"conversation_b": _convo("A1", "A2", "Other")}, "conversation_b",
         "has other user turns than conversation_a"),
        ({"turn": 1}, "turn", "is 1 but the conversations have 2 turns"),
        ({"conversation_b": _convo("A1", "A2")[1:]}, "conversation_b",
         "must alternate user and assistant turns, user first"),
    ],
)  # fmt: skip
def test_conversations_that_do_not_fit_are_refused(change, field, message):
    row = (
        _vote("vicuna", "alpaca", "model_a", "e")
        | {"conversation_a": _convo("V1", "V2"), "conversation_b": _convo("A1", "A2")}
        | change
    )
    with pytest.raises(RowError) as caught:
        mt_bench.convert(row, options=ReadOptions())
    assert (caught.value.field, caught.value.message) == (field, message)


# --- The shared FastChat files, when present -------------------------------------------------------
MT_BENCH = DATA_DIR / "mt_bench"


def test_every_turn_two_pair_of_the_six_models_converts():
    """All 80 questions x 15 model pairs at turn 2 convert; 13 pairs share their first answer
    (short factual answers such as question 131's "[5, 1, 3]"), the other 1,187 carry their own."""
    if not (MT_BENCH / "question.jsonl").is_file():
        pytest.skip(f"FastChat's MT-Bench files not present in {MT_BENCH}")
    options = ReadOptions(
        questions=mt_bench.load_questions(MT_BENCH / "question.jsonl"),
        answers=mt_bench.load_answers(MT_BENCH / "model_answer"),
    )
    how = []
    for question in options.questions:
        for model_a, model_b in itertools.combinations(sorted(options.answers), 2):
            row = {"question_id": int(question), "model_a": model_a, "model_b": model_b,
                   "winner": "tie", "judge": "e", "turn": 2}  # fmt: skip
            out = mt_bench.convert(row, options=options)
            how.append(out["metadata"]["earlier_answers"])
            assert out["prompt"][-1] == {
                "role": "user",
                "content": options.questions[question]["turns"][1],
            }
    assert len(how) == 1200 and how.count("shared") == 13

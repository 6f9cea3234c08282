"""Tiny MT-Bench files in FastChat's layout for importer and judge tests: one question (81) with two
turns, four models' answers (alpaca-13b and llama-13b share their first answer) and expert votes."""

import json
from pathlib import Path

QUESTION = ["Write a haiku about rain.", "Now make it rhyme."]
ANSWERS = {  # model -> (turn 1, turn 2); alpaca and llama gave the same first answer
    "gpt-4": ("Soft rain on the roof", "Rain taps, the drains gulp"),
    "claude-v1": ("Grey sky, wet stones", "Grey sky again, rain in the drain"),
    "alpaca-13b": ("Rain falls.", "Rain falls, all."),
    "llama-13b": ("Rain falls.", "Rain, rain, go away."),
}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """``rows`` written one JSON object a line to ``path``; returns ``path``."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def fastchat_files(tmp_path: Path) -> tuple[Path, Path]:
    """A one-question FastChat layout under ``tmp_path``: (question.jsonl, model_answer/)."""
    questions = write_jsonl(tmp_path / "question.jsonl", [{"question_id": 81, "turns": QUESTION}])
    folder = tmp_path / "model_answer"
    folder.mkdir()
    for model, turns in ANSWERS.items():
        write_jsonl(
            folder / f"{model}.jsonl",
            [{"question_id": 81, "model_id": model, "choices": [{"index": 0, "turns": turns}]}],
        )
    return questions, folder


def expert_vote(model_a: str, model_b: str, winner: str, judge: str, turn: int = 2) -> dict:
    """One human-judgment row of question 81 as the MT-Bench release writes it."""
    return {"question_id": 81, "model_a": model_a, "model_b": model_b, "winner": winner,
            "judge": judge, "turn": turn}  # fmt: skip

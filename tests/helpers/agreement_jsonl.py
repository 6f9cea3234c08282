"""JSONL rows with judgements for the Django-side agreement tests, and running commands."""

import io
import json
from pathlib import Path

import numpy as np
from django.core.management import call_command


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def import_file(path: Path, slug: str) -> None:
    run("import_comparisons", str(path), "--project", slug)


def agreement_json(slug: str, *extra: str) -> dict:
    return json.loads(run("agreement", "--project", slug, "--json", *extra))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def synthetic_rows(n: int = 90, seed: int = 0) -> list[dict]:
    """n comparisons; 5 annotators, 3 per comparison (the last 6 comparisons get 2); every 10th has a
    gold answer; "eve" prefers the left side."""
    rng = np.random.default_rng(seed)
    people = ["ana", "ben", "chloe", "dev", "eve"]
    rows = []
    for i in range(n):
        truth = rng.choice(["a", "b", "tie"], p=[0.45, 0.45, 0.1])
        judges = rng.choice(people, size=3 if i < n - 6 else 2, replace=False)
        judgements = []
        for name in judges:
            left = str(rng.choice(["a", "b"]))
            choice = str(truth) if rng.random() < 0.75 else str(rng.choice(["a", "b", "tie"]))
            if name == "eve" and rng.random() < 0.8:
                choice = left
            judgements.append(
                {"annotator": str(name), "choice": choice, "shown_left": left,
                 "elapsed_ms": int(rng.integers(3000, 60000)), "strength": 1}
            )  # fmt: skip
        rows.append(
            {"id": f"syn-{i}", "prompt": f"Question {i}?", "response_a": f"Answer A{i}" + "!" * i,
             "response_b": f"Answer B{i}", "judgements": judgements,
             **({"gold": str(truth)} if i % 10 == 0 else {})}
        )  # fmt: skip
    return rows

"""Readers of a judge's verdict files (pure: text lines in, ``FileVerdict`` rows out; no Django).

An imported judge's verdicts come from a file, one JSON object a line, in one of two formats:

- ``jsonl`` (Concord's): the comparison by ``comparison_id`` (Concord's id), by ``id`` (the
  external id it was imported with) or by its texts ``prompt``, ``response_a``, ``response_b``
  (matched in either orientation); then either ``verdict`` ("a" | "b" | "tie" | "inconsistent":
  the verdict the source combined from both orders, "inconsistent" when they disagreed) or the
  per-order verdicts ``a_first`` and/or ``b_first`` ("a" | "b" | "tie": the verdict with response
  A, resp. B, shown first). Verdicts are in the terms of the row's responses A and B.
- ``mt_bench`` (FastChat's / LMSYS's pairwise judgments): ``question_id``, ``model_a`` and
  ``model_b`` (or ``model_1``/``model_2``), ``turn`` (1 when absent), and either ``g1_winner`` /
  ``g2_winner`` (game 1 showed the first model first, game 2 the second; values already mapped
  back to the models, as FastChat writes them: "model_1" | "model_2" | "model_a" | "model_b" |
  "tie") or the combined ``release_winner`` / ``winner`` ("model_a" | "model_b" | "tie" |
  "tie (bothbad)" | "tie (inconsistent)"); ``order_consistent`` false marks an inconsistent tie.
  The row names its comparison as the MT-Bench importer made it (``annotation.formats.mt_bench``:
  responses ordered by model name).

A bad line is a ``VerdictRowError`` naming its line and field; ``read_verdict_file`` collects every
one so the caller can refuse the whole file at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

FORMATS = ("jsonl", "mt_bench")
VERDICTS = ("a", "b", "tie")
INCONSISTENT = "inconsistent"
MT_BENCH_SOURCE = "mt-bench"  # annotation.formats.mt_bench.NAME, the external ids' prefix
_FIRST, _SECOND = ("model_a", "model_1"), ("model_b", "model_2")
_MT_BENCH_COMBINED = {
    "model_a": "a",
    "model_1": "a",
    "model_b": "b",
    "model_2": "b",
    "tie": "tie",
    "tie (bothbad)": "tie",
    "tie (inconsistent)": INCONSISTENT,
}


class VerdictRowError(ValueError):
    """One unusable line: ``line`` (1-based), ``field`` and what is wrong."""

    def __init__(self, line: int, field_name: str, message: str) -> None:
        super().__init__(f"line {line}: {field_name}: {message}")
        self.line, self.field, self.message = line, field_name, message


@dataclass(frozen=True)
class FileVerdict:
    """One line's verdict on one comparison.

    The comparison is named by exactly one of ``comparison_id``, ``external_id`` or ``texts``
    (prompt as given, response A, response B). ``swapped``: the line's A and B are the stored
    comparison's B and A when matched by external id (MT-Bench rows name their models either way
    round); texts are matched in either orientation later. ``combined``: "a" | "b" | "tie" |
    "inconsistent" or None; ``orders``: {"a" | "b" (the line's response shown first): "a" | "b" |
    "tie"}, empty when ``combined`` is given. ``raw``: the label(s) as the file gave them.
    """

    line: int
    comparison_id: int | None = None
    external_id: str | None = None
    texts: tuple[object, str, str] | None = None
    swapped: bool = False
    combined: str | None = None
    orders: dict[str, str] = field(default_factory=dict)
    raw: str = ""


def _json_object(line: str, number: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise VerdictRowError(number, "line", f"not JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise VerdictRowError(number, "line", "must be a JSON object")
    return row


def _choice(row: dict, name: str, number: int, allowed: tuple[str, ...]) -> str:
    value = row.get(name)
    if value not in allowed:
        shown = " | ".join(f'"{a}"' for a in allowed)
        raise VerdictRowError(number, name, f"must be {shown}, got {value!r}")
    return value


def _concord_row(row: dict, number: int) -> FileVerdict:
    keys = [k for k in ("comparison_id", "id") if row.get(k) not in (None, "")]
    has_texts = any(k in row for k in ("prompt", "response_a", "response_b"))
    if len(keys) + has_texts != 1:
        raise VerdictRowError(
            number, "comparison", "name it by exactly one of comparison_id, id, or the texts "
            "prompt, response_a, response_b",
        )  # fmt: skip
    where: dict = {}
    if keys == ["comparison_id"]:
        value = row["comparison_id"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise VerdictRowError(number, "comparison_id", f"must be a positive id, got {value!r}")
        where["comparison_id"] = value
    elif keys == ["id"]:
        where["external_id"] = str(row["id"])
    else:
        for name in ("prompt", "response_a", "response_b"):
            if name not in row:
                raise VerdictRowError(number, name, "missing (a comparison named by its texts)")
        for name in ("response_a", "response_b"):
            if not isinstance(row[name], str):
                raise VerdictRowError(number, name, "must be a string")
        where["texts"] = (row["prompt"], row["response_a"], row["response_b"])
    orders = {o: _choice(row, f"{o}_first", number, VERDICTS) for o in "ab" if f"{o}_first" in row}
    if ("verdict" in row) == bool(orders):
        raise VerdictRowError(
            number, "verdict", "give either verdict (both orders combined) or a_first / b_first"
        )
    if orders:
        raw = json.dumps({f"{o}_first": v for o, v in orders.items()})
        return FileVerdict(number, orders=orders, raw=raw, **where)
    combined = _choice(row, "verdict", number, (*VERDICTS, INCONSISTENT))
    return FileVerdict(number, combined=combined, raw=combined, **where)


def _model(row: dict, names: tuple[str, ...], number: int) -> str:
    for name in names:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise VerdictRowError(number, names[0], f"missing (give {' or '.join(names)})")


def _mt_bench_row(row: dict, number: int) -> FileVerdict:
    question = row.get("question_id")
    if question in (None, "") or isinstance(question, bool | dict | list):
        raise VerdictRowError(number, "question_id", f"missing or not an id: {question!r}")
    first, second = _model(row, _FIRST, number), _model(row, _SECOND, number)
    if first == second:
        raise VerdictRowError(number, "model_b", "is the same model as model_a")
    turn = row.get("turn", 1)
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise VerdictRowError(number, "turn", f"must be a whole number from 1, got {turn!r}")
    low, high = sorted((first, second))
    where = {
        "external_id": f"{MT_BENCH_SOURCE}:{question}:turn{turn}:{low}|{high}",
        "swapped": first != low,
    }
    games = {g: row.get(f"{g}_winner") for g in ("g1", "g2")}
    if any(v is not None for v in games.values()):
        per_game = {"model_1": "a", "model_a": "a", "model_2": "b", "model_b": "b", "tie": "tie"}
        orders = {}
        for game, shown_first in (("g1", "a"), ("g2", "b")):
            value = games[game]
            if value is None:
                continue
            if value not in per_game:
                raise VerdictRowError(
                    number, f"{game}_winner", f"must be {' | '.join(per_game)}, got {value!r}"
                )
            orders[shown_first] = per_game[value]
        return FileVerdict(number, orders=orders, raw=json.dumps(games), **where)
    name = "release_winner" if row.get("release_winner") is not None else "winner"
    label = row.get(name)
    if label not in _MT_BENCH_COMBINED:
        raise VerdictRowError(
            number, name, f"must be one of {' | '.join(_MT_BENCH_COMBINED)}, got {label!r}"
        )
    combined = _MT_BENCH_COMBINED[label]
    if row.get("order_consistent") is False:
        if combined not in ("tie", INCONSISTENT):
            raise VerdictRowError(
                number, "order_consistent", f"false, but the verdict {label!r} is not a tie"
            )
        combined = INCONSISTENT
    return FileVerdict(number, combined=combined, raw=label, **where)


def read_verdict_file(
    lines: Iterable[str], *, fmt: str
) -> tuple[list[FileVerdict], list[VerdictRowError]]:
    """Every line of a verdict file in format ``fmt`` (``FORMATS``): the verdicts read and the
    errors of the lines that could not be (blank lines are skipped). ValueError for an unknown
    format."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    reader = _concord_row if fmt == "jsonl" else _mt_bench_row
    verdicts, errors = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            verdicts.append(reader(_json_object(line, number), number))
        except VerdictRowError as exc:
            errors.append(exc)
    return verdicts, errors

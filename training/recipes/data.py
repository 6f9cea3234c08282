"""Training data: preference pairs and prompts from JSONL, their tokenisation, and the epoch order.

Preference rows (one JSON object a line) take either form:

- TRL style: ``prompt``, ``chosen``, ``rejected`` (the export format), optional ``margin``;
- Concord's import format: ``prompt``, ``response_a``, ``response_b`` with ``gold`` ("a" | "b") or
  ``judgements`` (majority of "a"/"b" choices; ties and rows without a majority are skipped). Its
  per-annotator judgements also feed the annotator-aware reward model.

A Concord export's pairs rows also carry ``comparison_id``, ``chosen_side`` ("a" | "b") and
``cluster``; its raw per-annotator rows (``judgements.jsonl`` beside ``pairs.jsonl``, or
``NAME.judgements.jsonl`` beside ``NAME.jsonl``) are joined to the pairs by ``comparison_id`` for the
annotator-aware reward model (``judgements_file_for``).

``prompt`` is a string or a list of chat messages; responses are strings (or a one-message list).
Prompt rows (PPO, RLOO) need only ``prompt``. A bad line raises ``DataError`` naming its number.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.recipes.packing import TokenizedSequence

Messages = tuple[tuple[str, str], ...]  # ((role, content), ...), hashable


class DataError(ValueError):
    """A data file line is unusable; the message names the line and the field."""


@dataclass(frozen=True)
class PreferencePair:
    prompt: Messages
    chosen: str
    rejected: str
    margin: float = 0.0
    cluster: str | None = None  # the prompt's cluster (export rows), for domain conditioning


def _messages(value: Any, where: str) -> Messages:
    if isinstance(value, str):
        return (("user", value),)
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in value
        )
    ):
        return tuple((m["role"], m["content"]) for m in value)
    raise DataError(f"{where}: prompt must be a string or a list of {{role, content}} messages")


def _response(value: Any, where: str, name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        content = value[0].get("content")
        if isinstance(content, str):
            return content
    raise DataError(f"{where}: {name} must be a string or a one-message list")


def _majority(judgements: Any, where: str) -> str | None:
    if not isinstance(judgements, list):
        raise DataError(f"{where}: judgements must be a list")
    votes = [j.get("choice") for j in judgements if isinstance(j, dict)]
    a, b = votes.count("a"), votes.count("b")
    return "a" if a > b else "b" if b > a else None


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(f"{path.name} line {number}: not JSON ({error.msg})") from error
            if not isinstance(row, dict):
                raise DataError(f"{path.name} line {number}: not a JSON object")
            yield number, row


@dataclass(frozen=True)
class AnnotatorVote:
    """One annotator's judgement of one pair, for the annotator-aware reward model."""

    pair: int  # index into the pairs
    annotator: str
    prefers_chosen: bool  # voted for the pair's chosen response
    chosen_shown_left: bool | None  # which side the chosen response was on, when recorded


def _votes(row: dict[str, Any], winner: str, pair: int) -> list[AnnotatorVote]:
    """Per-annotator a/b votes of an import-format row, relative to the winner (ties skipped)."""
    votes = []
    for judgement in row.get("judgements", []):
        if not isinstance(judgement, dict) or judgement.get("choice") not in ("a", "b"):
            continue
        shown = judgement.get("shown_left")
        votes.append(
            AnnotatorVote(
                pair=pair,
                annotator=str(judgement.get("annotator", "?")),
                prefers_chosen=judgement["choice"] == winner,
                chosen_shown_left=None if shown not in ("a", "b") else shown == winner,
            )
        )
    return votes


def judgements_file_for(path: str | Path) -> Path | None:
    """The raw per-annotator file exported beside a pairs file, when there is one."""
    path = Path(path)
    for candidate in (
        path.with_name("judgements.jsonl") if path.name == "pairs.jsonl" else None,
        path.with_name(path.name.removesuffix(".jsonl") + ".judgements.jsonl"),
    ):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _export_votes(path: Path, sides: dict[int, tuple[int, str]]) -> list[AnnotatorVote]:
    """Votes of an export's raw rows on the pairs in ``sides`` (comparison id -> (pair index,
    chosen side)); ties, both-bad and rows of other comparisons are skipped."""
    votes = []
    for number, row in _read_jsonl(path):
        where = f"{path.name} line {number}"
        cid, choice = row.get("comparison_id"), row.get("choice")
        if cid not in sides or choice not in ("a", "b"):
            continue
        if "annotator" not in row:
            raise DataError(f"{where}: missing 'annotator'")
        pair, chosen_side = sides[cid]
        shown = row.get("shown_left")
        votes.append(
            AnnotatorVote(
                pair=pair,
                annotator=str(row["annotator"]),
                prefers_chosen=choice == chosen_side,
                chosen_shown_left=None if shown not in ("a", "b") else shown == chosen_side,
            )
        )
    return votes


def load_judged_pairs(
    path: str | Path, judgements: str | Path | None = None
) -> tuple[list[PreferencePair], list[AnnotatorVote]]:
    """Every usable pair of the file, in file order (rows without a decided winner are skipped), and
    the per-annotator votes: inline ``judgements`` of import-format rows, plus, with ``judgements``
    (an export's raw rows), the votes on export rows that name their ``comparison_id`` and
    ``chosen_side``."""
    path = Path(path)
    pairs: list[PreferencePair] = []
    votes: list[AnnotatorVote] = []
    sides: dict[int, tuple[int, str]] = {}
    for number, row in _read_jsonl(path):
        where = f"{path.name} line {number}"
        if "prompt" not in row:
            raise DataError(f"{where}: missing 'prompt'")
        prompt = _messages(row["prompt"], where)
        if "chosen" in row or "rejected" in row:
            chosen = _response(row.get("chosen"), where, "chosen")
            rejected = _response(row.get("rejected"), where, "rejected")
            side = row.get("chosen_side")
            if side is not None and side not in ("a", "b"):
                raise DataError(f"{where}: chosen_side must be 'a' or 'b', got {side!r}")
            if side is not None and row.get("comparison_id") is not None:
                sides[row["comparison_id"]] = (len(pairs), side)
        elif "response_a" in row and "response_b" in row:
            winner = row.get("gold") or _majority(row.get("judgements", []), where)
            if winner not in ("a", "b", None, "tie"):
                raise DataError(f"{where}: gold must be 'a', 'b' or 'tie', got {winner!r}")
            if winner not in ("a", "b"):
                continue
            a = _response(row["response_a"], where, "response_a")
            b = _response(row["response_b"], where, "response_b")
            chosen, rejected = (a, b) if winner == "a" else (b, a)
            votes.extend(_votes(row, winner, len(pairs)))
        else:
            raise DataError(
                f"{where}: needs 'chosen' and 'rejected', or 'response_a' and 'response_b'"
            )
        margin = row.get("margin", 0.0)
        if not isinstance(margin, int | float):
            raise DataError(f"{where}: margin must be a number")
        cluster = row.get("cluster")
        cluster = None if cluster is None else str(cluster)
        pairs.append(PreferencePair(prompt, chosen, rejected, float(margin), cluster))
    if not pairs:
        raise DataError(f"{path.name}: no usable preference pairs")
    if judgements is not None:
        votes.extend(_export_votes(Path(judgements), sides))
    return pairs, votes


def load_preference_pairs(path: str | Path) -> list[PreferencePair]:
    """Every usable pair of the file, in file order (rows without a decided winner are skipped)."""
    return load_judged_pairs(path)[0]


def load_prompts(path: str | Path) -> list[Messages]:
    """The ``prompt`` of every row, in file order."""
    path = Path(path)
    prompts = [
        _messages(row.get("prompt"), f"{path.name} line {n}") for n, row in _read_jsonl(path)
    ]
    if not prompts:
        raise DataError(f"{path.name}: no prompts")
    return prompts


def load_prompt_clusters(path: str | Path) -> dict[Messages, str]:
    """Each prompt's cluster where its row names one (export rows do), for scoring with a
    cluster-conditioned reward model; prompts without one are absent."""
    path = Path(path)
    found: dict[Messages, str] = {}
    for n, row in _read_jsonl(path):
        cluster = row.get("cluster")
        if cluster is not None:
            found[_messages(row.get("prompt"), f"{path.name} line {n}")] = str(cluster)
    return found


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split_eval(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Deterministic (train indices, eval indices); at least one eval item when fraction > 0."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    n_eval = max(1, round(n * fraction)) if fraction > 0 and n > 1 else 0
    return sorted(order[n_eval:]), sorted(order[:n_eval])


class ChatEncoder:
    """Turns (prompt messages, response) into token ids the way the model will see them.

    With a chat template the prompt is rendered with the generation prompt, and the completion is
    whatever the template adds for the assistant turn (its text plus end-of-turn tokens). Without one
    (base models), the completion is the response followed by EOS. Too-long pairs keep the end of the
    prompt (at most ``prompt_budget`` tokens) and the start of the response.
    """

    def __init__(self, tokenizer: Any, *, max_length: int, prompt_budget: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.prompt_budget = prompt_budget
        self.chat = bool(getattr(tokenizer, "chat_template", None))

    def fingerprint(self) -> str:
        """Changes whenever the same rows would tokenise differently."""
        parts = [
            type(self.tokenizer).__name__,
            str(len(self.tokenizer)),
            str(getattr(self.tokenizer, "chat_template", "")),
            str(self.max_length),
            str(self.prompt_budget),
        ]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]

    def prompt_text(self, prompt: Messages) -> str:
        if self.chat:
            return self.tokenizer.apply_chat_template(
                [{"role": r, "content": c} for r, c in prompt],
                add_generation_prompt=True,
                tokenize=False,
            )
        return "\n\n".join(content for _, content in prompt)

    def encode_prompt(self, prompt: Messages) -> list[int]:
        ids = self.tokenizer(self.prompt_text(prompt), add_special_tokens=not self.chat)[
            "input_ids"
        ]
        return ids[-self.prompt_budget :]

    def completion_text(self, prompt: Messages, response: str) -> str:
        if not self.chat:
            return response + (self.tokenizer.eos_token or "")
        messages = [{"role": r, "content": c} for r, c in prompt]
        head = self.prompt_text(prompt)
        full = self.tokenizer.apply_chat_template(
            [*messages, {"role": "assistant", "content": response}], tokenize=False
        )
        if not full.startswith(head):
            raise DataError("the chat template does not render the prompt as a prefix of the reply")
        return full[len(head) :]

    def encode(self, prompt: Messages, response: str) -> TokenizedSequence:
        prompt_ids = self.encode_prompt(prompt)
        completion = self.tokenizer(
            self.completion_text(prompt, response), add_special_tokens=False
        )["input_ids"]
        room = self.max_length - len(prompt_ids)
        return TokenizedSequence(tuple(prompt_ids + completion[:room]), len(prompt_ids))


class EpochSampler:
    """Batches of indices in a fresh seeded order each epoch; a position (epoch, batch) is all a
    checkpoint needs to resume mid-epoch exactly."""

    def __init__(self, n_items: int, batch_size: int, seed: int) -> None:
        if n_items < 1:
            raise ValueError("no items to sample")
        self.n_items, self.batch_size, self.seed = n_items, batch_size, seed

    @property
    def batches_per_epoch(self) -> int:
        return -(-self.n_items // self.batch_size)

    def batch(self, epoch: int, index: int) -> list[int]:
        order = torch.randperm(
            self.n_items, generator=torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        ).tolist()
        return order[index * self.batch_size : (index + 1) * self.batch_size]

    def positions(self, start_step: int, total_steps: int) -> Iterator[tuple[int, int, int]]:
        """(step, epoch, batch index) from ``start_step`` (0-based) to ``total_steps``."""
        for step in range(start_step, total_steps):
            yield step, step // self.batches_per_epoch, step % self.batches_per_epoch


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]

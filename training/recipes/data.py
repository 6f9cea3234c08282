"""Training data: preference pairs and prompts from JSONL, their tokenisation, and the epoch order.

Preference rows (one JSON object a line) take either form:

- TRL style: ``prompt``, ``chosen``, ``rejected`` (the export format), optional ``margin``;
- Concord's import format: ``prompt``, ``response_a``, ``response_b`` with ``gold`` ("a" | "b") or
  ``judgements`` (majority of "a"/"b" choices; ties and rows without a majority are skipped). Its
  per-annotator judgements also feed the annotator-aware reward model.

A Concord export's pairs rows also carry ``comparison_id``, ``chosen_side`` ("a" | "b"),
``cluster`` and, for prompts imported with one, the reference ``answer`` (read by
``load_prompt_answers``); its raw per-annotator rows (``judgements.jsonl`` beside ``pairs.jsonl``, or
``NAME.judgements.jsonl`` beside ``NAME.jsonl``) are joined to the pairs by ``comparison_id`` for the
annotator-aware reward model (``judgements_file_for``).

``prompt`` is a string or a list of chat messages; responses are strings (or a one-message list).
Prompt rows (PPO, RLOO, GRPO) need only ``prompt``; for GRPO's verifiable rewards a row may carry the
prompt's reference ``answer`` (or ``metadata.answer``). A bad line raises ``DataError`` naming its
number.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.recipes.packing import TokenizedSequence

Messages = tuple[tuple[str, str], ...]  # ((role, content), ...), hashable

FIT_LOG = logging.getLogger("training.fit")
# transformers' model_max_length when a tokenizer states no limit is 1e30; anything this large is none.
NO_TOKENIZER_LIMIT = 1_000_000


class DataError(ValueError):
    """A data file line is unusable; the message names the line and the field."""


@dataclass(frozen=True)
class PreferencePair:
    prompt: Messages
    chosen: str
    rejected: str
    margin: float = 0.0
    cluster: str | None = None  # the prompt's cluster (export rows), for domain conditioning


def row_messages(value: Any, where: str) -> Messages:
    """A row's prompt: text (one user turn) or a list of {role, content} messages; DataError
    naming ``where`` otherwise."""
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


def row_response(value: Any, where: str, name: str) -> str:
    """A row's answer ``name``: text or a one-message list (TRL's conversational format)."""
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


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for each non-blank line; DataError for a line that is not
    a JSON object."""
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
    for number, row in read_jsonl(path):
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
    for number, row in read_jsonl(path):
        where = f"{path.name} line {number}"
        if "prompt" not in row:
            raise DataError(f"{where}: missing 'prompt'")
        prompt = row_messages(row["prompt"], where)
        if "chosen" in row or "rejected" in row:
            chosen = row_response(row.get("chosen"), where, "chosen")
            rejected = row_response(row.get("rejected"), where, "rejected")
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
            a = row_response(row["response_a"], where, "response_a")
            b = row_response(row["response_b"], where, "response_b")
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
        row_messages(row.get("prompt"), f"{path.name} line {n}") for n, row in read_jsonl(path)
    ]
    if not prompts:
        raise DataError(f"{path.name}: no prompts")
    return prompts


def load_prompt_clusters(path: str | Path) -> dict[Messages, str]:
    """Each prompt's cluster where its row names one (export rows do), for scoring with a
    cluster-conditioned reward model; prompts without one are absent."""
    path = Path(path)
    found: dict[Messages, str] = {}
    for n, row in read_jsonl(path):
        cluster = row.get("cluster")
        if cluster is not None:
            found[row_messages(row.get("prompt"), f"{path.name} line {n}")] = str(cluster)
    return found


def load_prompt_answers(path: str | Path) -> dict[Messages, str]:
    """Each prompt's reference answer where its row gives one, in ``answer`` or ``metadata.answer``
    (a number is read as its text: GSM8K's "72"); prompts without one are absent. Two rows of the
    same prompt with different answers are a DataError."""
    path = Path(path)
    found: dict[Messages, str] = {}
    for n, row in read_jsonl(path):
        metadata = row.get("metadata")
        answer = row.get("answer")
        if answer is None and isinstance(metadata, dict):
            answer = metadata.get("answer")
        if answer is None:
            continue
        where = f"{path.name} line {n}"
        if isinstance(answer, bool) or not isinstance(answer, str | int | float):
            raise DataError(f"{where}: answer must be a text or a number, got {answer!r}")
        prompt = row_messages(row.get("prompt"), where)
        if found.get(prompt, str(answer)) != str(answer):
            raise DataError(
                f"{where}: the prompt's answer {answer!r} differs from an earlier row's"
            )
        found[prompt] = str(answer)
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


def token_limit(*, max_length: int, model_config: Any = None, tokenizer: Any = None) -> int:
    """The longest input a model may read: the run's ``max_length``, the model's position table
    (``max_position_embeddings`` or ``n_positions``) and the tokenizer's ``model_max_length``,
    whichever is smallest. A model past its position table crashes (BERT) or reads garbage."""
    limits = [max_length]
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(model_config, name, None)
        if isinstance(value, int) and value > 0:
            limits.append(value)
    stated = getattr(tokenizer, "model_max_length", None)
    if isinstance(stated, int) and 0 < stated < NO_TOKENIZER_LIMIT:
        limits.append(stated)
    return min(limits)


class FitLog:
    """Which inputs fitting into a model's token limit cut (truncated) or left out (dropped).

    Each distinct input (``key``) counts once, however often it is encoded; the first ``shown`` of
    each kind are logged at debug level on the ``training.fit`` logger with what was cut."""

    def __init__(self, noun: str, *, shown: int = 3) -> None:
        self.noun = noun
        self.shown = shown
        self._truncated: set[Hashable] = set()
        self._dropped: set[Hashable] = set()

    @property
    def truncated(self) -> int:
        return len(self._truncated)

    @property
    def dropped(self) -> int:
        return len(self._dropped)

    def _note(self, seen: set[Hashable], what: str, key: Hashable, detail: str) -> None:
        if key in seen:
            return
        seen.add(key)
        if len(seen) <= self.shown:
            FIT_LOG.debug("%s %s #%d: %s", self.noun, what, len(seen), detail)

    def note_truncated(self, key: Hashable, detail: str) -> None:
        self._note(self._truncated, "truncated", key, detail)

    def note_dropped(self, key: Hashable, detail: str) -> None:
        self._note(self._dropped, "dropped", key, detail)

    def summary(self) -> dict[str, int]:
        """``{noun}_truncated`` and ``{noun}_dropped`` for a run summary."""
        return {f"{self.noun}_truncated": self.truncated, f"{self.noun}_dropped": self.dropped}


def prompt_suffixes(prompt: Messages) -> list[Messages]:
    """The prompt, then ever shorter versions of it that leave out whole leading turns, each
    starting at a user turn (a leading system message stays); the last is the final user turn
    alone (or the last message, when no user turn follows the first)."""
    system = prompt[:1] if prompt and prompt[0][0] == "system" else ()
    turns = prompt[len(system) :]
    starts = [i for i, (role, _) in enumerate(turns) if role == "user" and i > 0]
    if not starts and len(turns) > 1:
        starts = [len(turns) - 1]
    return [prompt, *(system + turns[i:] for i in starts)]


def fit_prompt(
    prompt: Messages, budget: int, count: Callable[[Messages], int]
) -> tuple[Messages, bool]:
    """(the longest of ``prompt_suffixes`` whose ``count`` of tokens is within ``budget``, False
    when that is the whole prompt). When even the final user turn is longer, it is returned and
    the caller keeps its last ``budget`` tokens: the end of the conversation is what a reply
    answers."""
    candidates = prompt_suffixes(prompt)
    for index, candidate in enumerate(candidates):
        if count(candidate) <= budget:
            return candidate, index > 0
    return candidates[-1], True


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


class ChatEncoder:
    """Turns (prompt messages, response) into token ids the way the model will see them, within
    ``max_length`` tokens (pass ``token_limit``'s value: the model's own limits included).

    With a chat template the prompt is rendered with the generation prompt, and the completion is
    whatever the template adds for the assistant turn (its text plus end-of-turn tokens). Without one
    (base models), the completion is the response followed by EOS.

    Too-long inputs are fitted so that a reply still reads as one: the completion stays whole when
    the prompt can keep ``prompt_budget`` tokens beside it, and the prompt gives up whole leading
    turns first (``fit_prompt``), keeping the end of the conversation; only then are tokens cut
    (the prompt's start, the completion's end). ``prompt_cap`` bounds the prompt even when the
    completion is short (the user's ``max_prompt_length``). What was cut is noted in ``fit``.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_length: int,
        prompt_budget: int,
        prompt_cap: int | None = None,
        fit: FitLog | None = None,
    ) -> None:
        if not 0 < prompt_budget < max_length:
            raise ValueError(
                f"prompt_budget: must be in [1, {max_length}) (the token limit), got {prompt_budget}"
            )
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.prompt_budget = prompt_budget
        self.prompt_cap = prompt_cap
        self.fit = fit or FitLog("inputs")
        self.chat = bool(getattr(tokenizer, "chat_template", None))

    def fingerprint(self) -> str:
        """Changes whenever the same rows would tokenise differently."""
        parts = [
            type(self.tokenizer).__name__,
            str(len(self.tokenizer)),
            str(getattr(self.tokenizer, "chat_template", "")),
            str(self.max_length),
            str(self.prompt_budget),
            f"fit-v2 cap={self.prompt_cap}",
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

    def prompt_ids(self, prompt: Messages) -> list[int]:
        """The whole prompt's ids, as rendered (no fitting)."""
        return self.tokenizer(self.prompt_text(prompt), add_special_tokens=not self.chat)[
            "input_ids"
        ]

    def fit_prompt(self, prompt: Messages, budget: int) -> tuple[list[int], bool]:
        """(ids of the prompt within ``budget`` tokens, whether anything was left out)."""
        rendered: dict[Messages, list[int]] = {}

        def count(candidate: Messages) -> int:
            rendered[candidate] = self.prompt_ids(candidate)
            return len(rendered[candidate])

        kept, cut = fit_prompt(prompt, budget, count)
        return rendered[kept][-budget:], cut

    def encode_prompt(self, prompt: Messages) -> list[int]:
        """The prompt for generation: at most ``prompt_budget`` tokens, its end kept."""
        ids, cut = self.fit_prompt(prompt, self.prompt_budget)
        if cut:
            self.fit.note_truncated(
                prompt,
                f"prompt {_clip(prompt[-1][1])!r}: {len(self.prompt_ids(prompt))} -> "
                f"{len(ids)} tokens",
            )
        return ids

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

    def encode_responses(
        self, prompt: Messages, responses: Sequence[str], key: Hashable
    ) -> list[TokenizedSequence]:
        """Every response after the same fitted prompt (a pair's two answers read one prompt);
        what was cut is noted in ``fit`` under ``key``."""
        completions = [
            self.tokenizer(self.completion_text(prompt, r), add_special_tokens=False)["input_ids"]
            for r in responses
        ]
        longest = max(len(c) for c in completions)
        room = max(self.max_length - longest, self.prompt_budget)
        if self.prompt_cap is not None:
            room = min(room, self.prompt_cap)
        prompt_ids, prompt_cut = self.fit_prompt(prompt, room)
        left = self.max_length - len(prompt_ids)
        if prompt_cut or longest > left:
            self.fit.note_truncated(
                key,
                f"prompt {_clip(prompt[-1][1])!r}: {len(self.prompt_ids(prompt))} -> "
                f"{len(prompt_ids)} tokens; completions {[len(c) for c in completions]} -> "
                f"{[min(len(c), left) for c in completions]} tokens",
            )
        return [
            TokenizedSequence(tuple(prompt_ids + c[:left]), len(prompt_ids)) for c in completions
        ]

    def encode(self, prompt: Messages, response: str) -> TokenizedSequence:
        return self.encode_responses(prompt, [response], (prompt, response))[0]

    def encode_pair(
        self, prompt: Messages, chosen: str, rejected: str
    ) -> tuple[TokenizedSequence, TokenizedSequence] | None:
        """Both answers after one fitted prompt, or None (noted as dropped) when cutting them to
        fit left the same tokens: a pair without a difference teaches nothing."""
        key = (prompt, chosen, rejected)
        before = self.fit.truncated
        first, second = self.encode_responses(prompt, [chosen, rejected], key)
        if first.input_ids == second.input_ids and self.fit.truncated > before:
            self.fit.note_dropped(
                key, f"prompt {_clip(prompt[-1][1])!r}: both answers the same once fitted"
            )
            return None
        return first, second


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

"""KTO's data: labelled completions from preference pairs or TRL's unpaired format, their tokens,
the mismatched sequences of the KL estimate, and the reference log-probabilities of both (cached).

Examples: each preference pair of ``data`` gives its chosen answer as a desirable example and its
rejected one as an undesirable example (TRL's ``maybe_unpair_preference_dataset``); or, with
``unpaired_data`` (or a ``data`` file whose first row is a labelled completion: a snapshot of a
rating project's thumbs), each row of a JSONL file {"prompt", "completion", "label"} is one example (rows
{"prompt", "chosen", "rejected"} may be mixed in and are split the same way;
``training.algorithms.unpaired.unpaired_examples`` reads them). A prompt is text (the user turn) or,
in TRL's conversational format, a list of {role, content} messages, and answers may be one-message
lists; prompts are rendered with the chat template like every other prompt.

Mismatched sequences: in a step's batch of examples [e_0 .. e_{B-1}] the KL estimate reads
(prompt of e_k, completion of e_{k-1}), e_0 taking e_{B-1}'s completion (TRL's pairing, so the
mismatched completions are the batch's own completions with other prompts). A key (i, j) names
prompt i with completion j; a batch of one example (the last of an epoch) borrows the completion of
the example before it in the epoch's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.algorithms.kto import kto_balanced_weights
from training.algorithms.unpaired import unpaired_examples
from training.recipes.config import KTOConfig
from training.recipes.data import (
    ChatEncoder,
    DataError,
    EpochSampler,
    Messages,
    chunks,
    load_preference_pairs,
    read_jsonl,
    row_messages,
    row_response,
)
from training.recipes.packing import TokenizedSequence
from training.recipes.pair_policy import policy_encoder

MismatchedKey = tuple[int, int]  # (index of the example giving the prompt, ... the completion)


@dataclass(frozen=True)
class KTOExample:
    """One labelled completion: ``desirable`` True (a good answer) or False."""

    prompt: Messages
    completion: str
    desirable: bool


def data_file(config: KTOConfig) -> Path:
    """The file the examples come from: ``unpaired_data`` when set, else ``data``."""
    return Path(config.unpaired_data or config.data)


def _holds_unpaired_rows(path: Path) -> bool:
    """Whether the file's first row is a labelled completion (``completion`` and ``label``: a
    rating project's thumbs export), read as TRL's unpaired format rather than as pairs."""
    if not path.is_file():
        return False
    first = next(read_jsonl(path), None)
    return first is not None and "completion" in first[1] and "label" in first[1]


def load_kto_examples(config: KTOConfig) -> list[KTOExample]:
    """The run's examples in file order (see the module docstring). Raises DataError naming the
    file, the line and the field for a bad row, and for a file with no examples. A ``data`` file
    of labelled completions (a snapshot of a rating project's thumbs) reads as ``unpaired_data``
    does."""
    path = Path(config.unpaired_data or config.data)
    if config.unpaired_data is None and not _holds_unpaired_rows(path):
        return [
            example
            for pair in load_preference_pairs(config.data)
            for example in (
                KTOExample(pair.prompt, pair.chosen, True),
                KTOExample(pair.prompt, pair.rejected, False),
            )
        ]
    if not path.is_file():
        raise DataError(f"unpaired_data: no such file {path}")
    examples = []
    for number, row in read_jsonl(path):
        row, conversation = _text_fields(row, f"{path.name} line {number}")
        try:
            read = unpaired_examples([row])
        except ValueError as error:  # "row 1: ..." (one row at a time): name the file's line
            problem = str(error).removeprefix("row 1: ")
            raise DataError(f"{path.name} line {number}: {problem}") from error
        examples.extend(
            KTOExample(conversation or (("user", e.prompt),), e.completion, e.desirable)
            for e in read
        )
    if not examples:
        raise DataError(f"{path.name}: no rows: KTO needs labelled completions")
    return examples


def _text_fields(row: Any, where: str) -> tuple[Any, Messages | None]:
    """TRL's conversational unpaired rows as text for ``unpaired_examples``: a prompt given as a
    list of {role, content} messages is returned apart (the row keeps a text stand-in), answers
    given as one-message lists become their text. Other rows pass unchanged (None)."""
    if not isinstance(row, dict):
        return row, None
    row = dict(row)
    for key in ("completion", "chosen", "rejected"):
        if isinstance(row.get(key), list):
            row[key] = row_response(row[key], where, key)
    if not isinstance(row.get("prompt"), list):
        return row, None
    conversation = row_messages(row["prompt"], where)
    row["prompt"] = conversation[-1][1] or "(conversation)"
    return row, conversation


def kto_weights(config: KTOConfig, examples: list[KTOExample]) -> tuple[float, float]:
    """(desirable_weight, undesirable_weight): the config's, or balanced from the examples
    (``kto_balanced_weights``). DataError when balancing meets a data set with one kind only."""
    if config.desirable_weight is not None and config.undesirable_weight is not None:
        return config.desirable_weight, config.undesirable_weight
    n_desirable = sum(e.desirable for e in examples)
    try:
        return kto_balanced_weights(n_desirable, len(examples) - n_desirable)
    except ValueError as error:
        raise DataError(
            f"{data_file(config).name}: {error}; set desirable_weight and undesirable_weight to "
            "train on one kind"
        ) from error


class KTOSequences:
    """The examples' token sequences, fitted to the models' limits, and the mismatched sequences
    (prompt i, completion j), tokenised on first use."""

    def __init__(self, encoder: ChatEncoder, examples: list[KTOExample]) -> None:
        self.encoder = encoder
        self.examples = examples
        self.sequences = [encoder.encode(e.prompt, e.completion) for e in examples]
        self.desirable = torch.tensor([e.desirable for e in examples], dtype=torch.bool)
        self._mismatched: dict[MismatchedKey, TokenizedSequence] = {}

    def __len__(self) -> int:
        return len(self.examples)

    def mismatched(self, key: MismatchedKey) -> TokenizedSequence:
        if key not in self._mismatched:
            prompt, completion = self.examples[key[0]].prompt, self.examples[key[1]].completion
            self._mismatched[key] = self.encoder.encode(prompt, completion)
        return self._mismatched[key]


def fit_kto_examples(config: KTOConfig, tokenizer: object) -> KTOSequences:
    """The run's examples tokenised within the policy's and the reference's limits; DataError
    when there are fewer than 2 (the KL estimate pairs a prompt with another completion)."""
    examples = load_kto_examples(config)
    if len(examples) < 2:
        raise DataError(
            f"{data_file(config).name}: {len(examples)} example; KTO needs at least 2 (the KL "
            "estimate pairs each prompt with another example's completion)"
        )
    return KTOSequences(policy_encoder(config, tokenizer, unit="examples"), examples)


def mismatched_keys(sampler: EpochSampler, epoch: int, batch_index: int) -> list[MismatchedKey]:
    """The KL estimate's (prompt, completion) example pairs of the batch at (epoch, batch_index):
    [(e_k, e_{k-1})], e_0 with the batch's last example (see the module docstring)."""
    batch = sampler.batch(epoch, batch_index)
    if len(batch) == 1:  # the epoch's last batch: borrow the completion before it
        return [(batch[0], sampler.batch(epoch, batch_index - 1)[-1])]
    return [(batch[k], batch[k - 1]) for k in range(len(batch))]


@dataclass
class KTOReference:
    """Reference log-probabilities (summed over completion tokens, float32): ``examples`` [P] with
    ``known`` [P] (which hold values yet), and ``mismatched`` {(i, j): value}."""

    examples: torch.Tensor
    known: torch.Tensor
    mismatched: dict[MismatchedKey, float]

    @classmethod
    def empty(cls, n_examples: int) -> KTOReference:
        return cls(torch.zeros(n_examples), torch.zeros(n_examples, dtype=torch.bool), {})

    def fill_examples(self, index: list[int], totals: torch.Tensor) -> None:
        self.examples[index] = totals.detach().float().cpu()
        self.known[index] = True

    def fill_mismatched(self, keys: list[MismatchedKey], totals: torch.Tensor) -> None:
        self.mismatched.update(zip(keys, totals.detach().float().cpu().tolist(), strict=True))

    def example_values(self, index: list[int]) -> torch.Tensor:
        if not bool(self.known[index].all()):
            missing = [i for i in index if not self.known[i]]
            raise RuntimeError(f"reference log-probs missing for examples {missing[:5]}")
        return self.examples[index]

    def mismatched_values(self, keys: list[MismatchedKey]) -> torch.Tensor:
        missing = [key for key in keys if key not in self.mismatched]
        if missing:
            raise RuntimeError(f"reference log-probs missing for mismatched pairs {missing[:5]}")
        return torch.tensor([self.mismatched[key] for key in keys])

    def save(self, path: Path) -> None:
        """Write atomically (a partial file, then a rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = torch.tensor(list(self.mismatched), dtype=torch.long).view(-1, 2)
        values = torch.tensor(list(self.mismatched.values()), dtype=torch.float32)
        partial = path.with_suffix(".partial")
        torch.save(
            {"examples": self.examples, "known": self.known, "keys": keys, "values": values},
            partial,
        )
        partial.replace(path)

    @classmethod
    def load(cls, path: Path, n_examples: int) -> KTOReference | None:
        """The cached table, or None when there is none for ``n_examples`` examples."""
        if not path.is_file():
            return None
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if saved["examples"].shape[0] != n_examples:
            return None
        keys = [(int(i), int(j)) for i, j in saved["keys"].tolist()]
        return cls(
            saved["examples"],
            saved["known"],
            dict(zip(keys, saved["values"].tolist(), strict=True)),
        )


@dataclass
class ReferenceWork:
    """One step's share of the reference pass: example index groups and mismatched key groups,
    one forward each (the step's micro-batches)."""

    examples: list[list[int]]
    mismatched: list[list[MismatchedKey]]


def kto_reference_work(
    sampler: EpochSampler,
    reference: KTOReference,
    *,
    start_step: int,
    total_steps: int,
    micro_batch_size: int,
    fill_first_step: bool,
    first_step_at_reference: bool,
) -> list[ReferenceWork]:
    """The reference pass a run needs: for each step from ``start_step`` (0-based) to
    ``total_steps``, in order, its examples and mismatched pairs not in ``reference`` yet and not
    met at an earlier step, in micro-batch groups; steps with nothing new are left out.

    ``fill_first_step``: step 1's examples take their values from step 1's own forward (policy =
    reference). ``first_step_at_reference``: step 1 runs the reference itself, so its KL estimate
    is 0 and its mismatched pairs need no values."""
    pending = ~reference.known.clone()
    seen: set[MismatchedKey] = set(reference.mismatched)
    work = []
    for step, epoch, batch_index in sampler.positions(start_step, total_steps):
        batch = [i for i in sampler.batch(epoch, batch_index) if pending[i]]
        pending[batch] = False
        if fill_first_step and step == 0:
            batch = []
        keys: list[MismatchedKey] = []
        if not (first_step_at_reference and step == 0):
            keys = [k for k in mismatched_keys(sampler, epoch, batch_index) if k not in seen]
            seen.update(keys)
        if batch or keys:
            work.append(
                ReferenceWork(
                    [list(g) for g in chunks(batch, micro_batch_size)],
                    [list(g) for g in chunks(keys, micro_batch_size)],
                )
            )
    return work

"""DPO recipe: preference pairs -> a policy, against reference log-probabilities computed once.

Per optimiser step: for each micro-batch, chosen and rejected sequences go through the policy in one
packed forward (no padding; logits only at completion positions), the DPO loss is summed over pairs
and divided by the step's pair count (so gradient accumulation is exact), then one clipped AdamW step.

With LoRA (``lora_rank`` > 0) and no ``ref_model``, the reference is the policy with its adapters
switched off (``lora.BaseModelView``): the base weights, never a second copy, even when resuming.

The reference model never changes, so its log-probabilities are computed once and cached on disk
under a key made of the data file's hash, the reference weights' hash, the tokenisation and the
precision. Only the pairs this run trains on are computed (``max_steps`` x ``batch_size``, or the
epochs), in the order the steps first need them, before the first step and with a progress phase
("reference log-probs", one call per batch); the cache records which pairs it holds, so a later run
with more steps computes only the rest. When the reference is the starting policy (the default), no
second model is loaded, and the first step's pairs need no reference pass at all: until the first
update the policy is the reference, so the first step's own forward (same layout, dropout off) gives
their reference values exactly. The cache's path, the reference model and the rank that computes it
are KTO's too (``training.recipes.reference_pass``); the table and its forward are DPO's own.

Pairs are fitted to the policy's and the reference's limits (``max_length``, position tables, the
tokenizer's ``model_max_length``) before anything runs; the summary counts what was cut or dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from training.algorithms import dpo_loss
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import DPOConfig
from training.recipes.data import (
    ChatEncoder,
    EpochSampler,
    chunks,
    file_sha256,
)
from training.recipes.distributed import all_reduce_sum
from training.recipes.loop import (
    LoopEnd,
    PairRecipeState,
    Position,
    Run,
    StepOutcome,
    optimizer_step,
    train_pair_recipe,
)
from training.recipes.models import model_fingerprint
from training.recipes.pair_policy import (
    METRIC_SUMS,
    PairTokens,
    forward_pairs,
    pair_metric_sums,
    policy_pair_fields,
)
from training.recipes.reference_pass import REFERENCE_PHASE, reference_cache_path, reference_pass
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    peak_memory_bytes,
)


@dataclass
class ReferenceLogps:
    """Per pair: summed reference log-probabilities and completion token counts, [P] each, and
    ``known`` [P] bool: which pairs hold values yet (the pass covers only the pairs a run needs)."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor
    known: torch.Tensor

    @classmethod
    def empty(cls, n_pairs: int) -> ReferenceLogps:
        zeros = torch.zeros(n_pairs)
        counts = torch.zeros(n_pairs, dtype=torch.long)
        return cls(
            zeros, zeros.clone(), counts, counts.clone(), torch.zeros(n_pairs, dtype=torch.bool)
        )

    def fill(self, index: list[int], totals: torch.Tensor, lengths: torch.Tensor) -> None:
        """Set pairs ``index`` from one forward's outputs: totals, lengths [2m] (chosen, rejected)."""
        m = len(index)
        totals, lengths = totals.float().cpu(), lengths.cpu()
        self.chosen[index], self.rejected[index] = totals[:m], totals[m:]
        self.chosen_tokens[index], self.rejected_tokens[index] = lengths[:m], lengths[m:]
        self.known[index] = True

    def select(self, index: list[int], *, average: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if not bool(self.known[index].all()):
            missing = [i for i in index if not self.known[i]]
            raise RuntimeError(f"reference log-probs missing for pairs {missing[:5]}")
        chosen, rejected = self.chosen[index], self.rejected[index]
        if average:
            chosen = chosen / self.chosen_tokens[index].clamp(min=1)
            rejected = rejected / self.rejected_tokens[index].clamp(min=1)
        return chosen, rejected

    def save(self, path: Path) -> None:
        """Write atomically (a partial file, then a rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial_path = path.with_suffix(".partial")
        torch.save(
            {
                "chosen": self.chosen,
                "rejected": self.rejected,
                "chosen_tokens": self.chosen_tokens,
                "rejected_tokens": self.rejected_tokens,
                "known": self.known,
            },
            partial_path,
        )
        partial_path.replace(path)

    @classmethod
    def load(cls, path: Path, n_pairs: int) -> ReferenceLogps | None:
        """The cached table, or None when there is none for these pairs (a table written before
        the cache recorded ``known`` holds every pair)."""
        if not path.is_file():
            return None
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if saved["chosen"].shape[0] != n_pairs:
            return None
        known = saved.get("known")
        return cls(
            saved["chosen"],
            saved["rejected"],
            saved["chosen_tokens"],
            saved["rejected_tokens"],
            known if known is not None else torch.ones(n_pairs, dtype=torch.bool),
        )


def compute_reference_logps(
    model: Any,
    pairs: list[PairTokens],
    batches: list[list[list[int]]],
    *,
    packed: bool,
    pad_token_id: int,
    device: torch.device,
    bf16: bool,
    into: ReferenceLogps | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> ReferenceLogps:
    """Reference log-probabilities of the pairs in ``batches`` (each a list of micro-batch groups
    of pair indices, one forward per group), without gradients, filled ``into`` an existing table
    (a new one when None). ``on_batch(done, total)`` after each batch. The recipe passes its steps'
    micro-batches: the same batch layout as training, so under bf16 (where a different layout
    rounds differently) step 1 still sees policy = reference exactly."""
    reference = into if into is not None else ReferenceLogps.empty(len(pairs))
    was_training = model.training
    model.eval()
    with torch.inference_mode(), autocast(device, bf16):
        for done, batch in enumerate(batches, start=1):
            for group in batch:
                totals, lengths, _ = forward_pairs(
                    model,
                    [pairs[i] for i in group],
                    packed=packed,
                    pad_token_id=pad_token_id,
                    device=device,
                )
                reference.fill(group, totals, lengths)
            if on_batch is not None:
                on_batch(done, len(batches))
    model.train(was_training)
    return reference


def reference_batches(
    sampler: EpochSampler,
    *,
    start_step: int,
    total_steps: int,
    micro_batch_size: int,
    known: torch.Tensor,
    skip_first_step: bool,
) -> list[list[list[int]]]:
    """The reference pass a run needs: for each step from ``start_step`` (0-based) to
    ``total_steps``, in order, its pairs not ``known`` [P] yet and not met at an earlier step, in
    micro-batch groups; steps with nothing new are left out. ``skip_first_step``: step 1's pairs
    are filled by step 1's own forward instead."""
    pending = ~known.clone()
    batches = []
    for step, epoch, index in sampler.positions(start_step, total_steps):
        if not bool(pending.any()):
            break
        batch = [i for i in sampler.batch(epoch, index) if pending[i]]
        pending[batch] = False
        if batch and not (skip_first_step and step == 0):
            batches.append([list(group) for group in chunks(batch, micro_batch_size)])
    return batches


def _dpo_micro_batch(
    policy: Any,
    pairs: list[PairTokens],
    index: list[int],
    reference: ReferenceLogps,
    config: DPOConfig,
    *,
    step_pairs: int,
    packed: bool,
    pad_token_id: int,
    device: torch.device,
    fill_reference: bool = False,
) -> dict[str, float]:
    """Forward and backward for one micro-batch; returns its metric sums (divide by step pairs).

    With ``fill_reference`` (first step, policy = reference) the forward's own detached log-probs
    become these pairs' reference values before the loss reads them."""
    with autocast(device, config.bf16):
        totals, lengths, n_tokens = forward_pairs(
            policy,
            [pairs[i] for i in index],
            packed=packed,
            pad_token_id=pad_token_id,
            device=device,
        )
    m = len(index)
    if fill_reference:  # only the pairs the cache does not hold yet
        new = [k for k, i in enumerate(index) if not reference.known[i]]
        if new:
            rows = torch.tensor(new + [k + m for k in new], device=totals.device)
            reference.fill(
                [index[k] for k in new],
                totals.detach().index_select(0, rows),
                lengths.index_select(0, rows.to(lengths.device)),
            )
    average = config.loss_type == "ipo"
    logps = totals / lengths.clamp(min=1) if average else totals
    policy_chosen, policy_rejected = logps[:m], logps[m:]
    ref_chosen, ref_rejected = (t.to(device) for t in reference.select(index, average=average))
    losses, chosen_rewards, rejected_rewards = dpo_loss(
        policy_chosen,
        policy_rejected,
        ref_chosen,
        ref_rejected,
        beta=config.beta,
        loss_type=config.loss_type,  # type: ignore[arg-type]
        label_smoothing=config.label_smoothing,
    )
    (losses.sum() / step_pairs).backward()
    return pair_metric_sums(losses, chosen_rewards, rejected_rewards, totals, n_tokens)


@dataclass
class DPOState(PairRecipeState):
    """What a DPO run holds between steps, beside ``PairRecipeState``'s: the fitted pairs, the
    policy (``model``) and the reference table (``reference_pass.cache_path`` on disk)."""

    config: DPOConfig
    encoder: ChatEncoder
    pairs: list[PairTokens]
    packed: bool
    reference: ReferenceLogps
    reference_pass: ReferencePass


@dataclass
class ReferencePass:
    """How the reference table was filled: pairs found in the cache, pairs computed (step 1's
    own forward adds to them), the seconds it took, and whether step 1 fills its own pairs."""

    cache_path: Path
    cached_pairs: int
    computed_pairs: int
    seconds: float
    fill_first_step: bool


def train_dpo(config: DPOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run DPO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    return train_pair_recipe(
        config, callback, kind="dpo", setup=setup_dpo, step=dpo_step, summary=dpo_summary
    )


def setup_dpo(run: Run, config: DPOConfig) -> DPOState:
    """Tokenizer, fitted pairs, policy (from the checkpoint when resuming), the reference pass,
    optimiser and schedule, restored to where the run stopped."""

    def with_reference(fields: dict[str, Any]) -> dict[str, Any]:
        reference, reference_pass = fill_reference(
            run,
            config,
            policy=fields["model"],
            packed=fields["packed"],
            pairs=fields["pairs"],
            encoder=fields["encoder"],
            pad_token_id=fields["tokenizer"].pad_token_id,
            batches=partial(
                reference_batches,
                fields["sampler"],
                start_step=fields["start_step"],
                total_steps=fields["total_steps"],
            ),
        )
        return {"reference": reference, "reference_pass": reference_pass}

    return DPOState(**policy_pair_fields(run, config, with_reference))


def fill_reference(
    run: Run,
    config: DPOConfig,
    *,
    policy: Any,
    packed: bool,
    pairs: list[PairTokens],
    encoder: ChatEncoder,
    pad_token_id: int,
    batches: Callable[..., list[list[list[int]]]],
) -> tuple[ReferenceLogps, ReferencePass]:
    """The reference table this run needs: what the cache holds, plus a pass over the pairs it
    lacks (rank 0 computes and writes the cache, the other ranks read it), reported as the phase
    ``REFERENCE_PHASE``. ``batches(micro_batch_size=, known=, skip_first_step=)`` lays out the
    pass (``reference_batches`` bound to the run's sampler and steps)."""
    started = time.perf_counter()
    cache_path = reference_cache_path(
        config,
        run.output_dir,
        table="dpo",
        key_prefix="",
        data_sha256=file_sha256(config.data),
        reference_sha256=model_fingerprint(Path(config.ref_model or config.model)),
        encoder=encoder,
    )
    reference = ReferenceLogps.load(cache_path, len(pairs)) or ReferenceLogps.empty(len(pairs))
    cached_pairs = int(reference.known.sum())
    # The first step's pairs take their reference values from the first step's forward (see the
    # module docstring); one process only, so that every pair is filled where it is trained.
    fill_first_step = (
        config.ref_model is None
        and run.resume_from is None
        and config.disable_dropout
        and run.ranks.world == 1
    )
    todo = batches(
        micro_batch_size=config.micro_batch_size or config.batch_size,
        known=reference.known,
        skip_first_step=fill_first_step,
    )

    def compute(model: Any) -> None:
        run.callback.on_phase(phase=REFERENCE_PHASE, done=0, total=len(todo))
        compute_reference_logps(
            model,
            pairs,
            todo,
            packed=packed,
            pad_token_id=pad_token_id,
            device=run.device,
            bf16=config.bf16,
            into=reference,
            on_batch=lambda done, total: run.callback.on_phase(
                phase=REFERENCE_PHASE, done=done, total=total
            ),
        )

    reference = reference_pass(
        run,
        config,
        policy=policy,
        table=reference,
        has_work=bool(todo),
        compute=compute,
        cache_path=cache_path,
        load=lambda path: ReferenceLogps.load(path, len(pairs)),
    )
    return reference, ReferencePass(
        cache_path=cache_path,
        cached_pairs=cached_pairs,
        computed_pairs=int(reference.known.sum()) - cached_pairs,
        seconds=time.perf_counter() - started,
        fill_first_step=fill_first_step,
    )


def dpo_step(state: DPOState, at: Position, throughput: Throughput) -> StepOutcome:
    """One optimiser step on the sampler's batch at ``at``: this rank's micro-batches forward and
    backward, metric sums over every rank, one clipped step (see the module docstring)."""
    config, run, reference_pass = state.config, state.run, state.reference_pass
    index = state.sampler.batch(at.epoch, at.batch_index)
    with throughput.timing():
        sums = dict.fromkeys(METRIC_SUMS, 0.0)
        for group in chunks(run.ranks.shard(index), state.micro_batch_size):
            part = _dpo_micro_batch(
                state.model,
                state.pairs,
                list(group),
                state.reference,
                config,
                step_pairs=len(index),
                packed=state.packed,
                pad_token_id=state.tokenizer.pad_token_id,
                device=run.device,
                fill_reference=reference_pass.fill_first_step and at.step == 1,
            )
            sums = {k: sums[k] + v for k, v in part.items()}
        sums = all_reduce_sum(sums, run.ranks, run.device)
        grad_norm = optimizer_step(
            state.model.parameters(),
            state.optimizer,
            state.scheduler,
            config.max_grad_norm,
            run.ranks,
        )
        known = int(state.reference.known.sum())
        if reference_pass.fill_first_step and known > reference_pass.cached_pairs + (
            reference_pass.computed_pairs
        ):
            reference_pass.computed_pairs = known - reference_pass.cached_pairs
            state.reference.save(reference_pass.cache_path)  # step 1's pairs
    throughput.items += len(index)
    throughput.tokens += int(sums["tokens"])
    metrics = {k: v / len(index) for k, v in sums.items() if k != "tokens"}
    metrics.update(grad_norm=grad_norm, learning_rate=state.scheduler.get_last_lr()[0])
    return StepOutcome(metrics)


def dpo_summary(state: DPOState, end: LoopEnd) -> dict[str, Any]:
    """The run's summary: data, what the reference pass did, rates and the last metrics."""
    throughput, reference_pass = end.throughput, state.reference_pass
    train_seconds, reference_seconds = throughput.seconds, reference_pass.seconds
    return {
        "kind": "dpo",
        "pairs": len(state.pairs),
        "pairs_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": train_seconds,
        "reference_seconds": reference_seconds,
        "reference_cache_hit": reference_pass.computed_pairs == 0,
        "reference_pairs_cached": reference_pass.cached_pairs,
        "reference_pairs_computed": reference_pass.computed_pairs,
        # True: step 1's pairs took their reference values from step 1's own forward (no pass).
        "reference_first_step_filled": reference_pass.fill_first_step,
        **state.encoder.fit.summary(),
        # Whole-run rates count the reference pass too: it is work this run had to do.
        "pairs_per_second": throughput.items / (train_seconds + reference_seconds)
        if throughput.items
        else 0.0,
        "tokens_per_second": throughput.tokens / (train_seconds + reference_seconds)
        if throughput.tokens
        else 0.0,
        "train_pairs_per_second": throughput.per_second(throughput.items),
        "train_tokens_per_second": throughput.per_second(throughput.tokens),
        "packed": state.packed,
        "bf16": state.config.bf16,
        "peak_memory_bytes": peak_memory_bytes(state.run.device),
        "last_metrics": end.last_logged,
    }

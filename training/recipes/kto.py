"""KTO recipe: completions labelled desirable or undesirable -> a policy, against reference
log-probabilities computed once (Ethayarajh et al. 2024; ``training.algorithms.kto_loss``).

Data (``training.recipes.kto_data``): a snapshot's preference pairs, each split into a desirable
(chosen) and an undesirable (rejected) example, or a JSONL file in TRL's unpaired format. Batches
are of examples (``batch_size`` labelled completions); rates are in examples per second.

Per optimiser step:

1. the KL estimate z0: the step's mismatched sequences (each example's prompt with the completion of
   the example before it in the batch) go through the policy without gradients, in micro-batches;
   the mean over the whole batch (every rank) of log pi - log pi_ref is z0 (clamped at 0 by the
   loss). At step 1 of a run whose reference is the starting policy, pi = pi_ref, so z0 = 0 and
   this pass is not run;
2. for each micro-batch, the examples go through the policy in one packed forward (sequences with
   the same prompt, a split pair's two answers, hold it once), the per-example KTO losses are summed
   and divided by the step's example count (gradient accumulation is exact), then one clipped AdamW
   step.

Reference log-probabilities of the examples and of the mismatched sequences are computed before the
first step, only for the steps this run will train (``kto_data.kto_reference_work``), and cached on
disk under a key of the data file, the reference weights, the tokenisation and the precision, by
the same reference pass as DPO's (``training.recipes.reference_pass``). With the starting policy
as reference, step 1's examples take theirs from step 1's own forward (single process), as in DPO.

Metrics: ``loss``, ``rewards/desirable`` and ``rewards/undesirable`` (mean beta * (log pi - log
pi_ref) over the step's examples of each kind; 0 when the step has none of a kind), their difference
``rewards/margin``, ``kl_estimate`` (z0 before clamping), ``logps/desirable`` and
``logps/undesirable`` (mean summed log-probs), ``desirable_fraction``, ``grad_norm``,
``learning_rate``. The KL estimate is not called ``kl``: that name's alert is PPO's per-token
threshold, which a sequence-level estimate passes by design.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

import torch

from training.algorithms.kto import kto_kl_estimate, kto_loss
from training.recipes.callbacks import TrainingCallback
from training.recipes.checkpoint_files import checkpoint_step
from training.recipes.config import KTOConfig
from training.recipes.data import EpochSampler, chunks, file_sha256
from training.recipes.distributed import all_reduce_sum
from training.recipes.kto_data import (
    KTOReference,
    KTOSequences,
    ReferenceWork,
    data_file,
    fit_kto_examples,
    kto_reference_work,
    kto_weights,
    mismatched_keys,
)
from training.recipes.loop import (
    LoopEnd,
    PairRecipeState,
    Position,
    Run,
    StepOutcome,
    optimizer_step,
    train_pair_recipe,
)
from training.recipes.models import (
    load_policy,
    load_tokenizer,
    model_fingerprint,
)
from training.recipes.pair_policy import forward_sequences
from training.recipes.reference_pass import REFERENCE_PHASE, reference_cache_path, reference_pass
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    build_optimizer,
    build_scheduler,
    peak_memory_bytes,
    total_steps_for,
)

METRIC_SUMS = (
    "loss",
    "rewards/desirable",
    "rewards/undesirable",
    "logps/desirable",
    "logps/undesirable",
    "desirable",
    "undesirable",
    "tokens",
)


@dataclass
class KTOReferencePass:
    """How the reference table was filled: examples and mismatched pairs found in the cache and
    computed, the seconds it took, and what step 1 does itself (``fill_first_step``: its
    examples' reference values; ``first_step_at_reference``: no KL pass, z0 = 0)."""

    cache_path: Path
    cached: int
    computed: int
    seconds: float
    fill_first_step: bool
    first_step_at_reference: bool


@dataclass
class KTOState(PairRecipeState):
    """What a KTO run holds between steps, beside ``PairRecipeState``'s: the examples' sequences,
    the loss weights, the reference table and how it was filled."""

    config: KTOConfig
    data: KTOSequences
    weights: tuple[float, float]
    packed: bool
    reference: KTOReference
    reference_pass: KTOReferencePass


def train_kto(config: KTOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run KTO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    return train_pair_recipe(
        config,
        callback,
        kind="kto",
        setup=setup_kto,
        step=kto_step,
        summary=kto_summary,
        rate_name="examples",
    )


def setup_kto(run: Run, config: KTOConfig) -> KTOState:
    """Tokenizer, examples and weights, policy (from the checkpoint when resuming), the reference
    pass, optimiser and schedule, restored to where the run stopped."""
    tokenizer = load_tokenizer(config.model)
    data = fit_kto_examples(config, tokenizer)
    weights = kto_weights(config, data.examples)
    resume_from = run.resume_from
    policy, packed = load_policy(resume_from or config.model, config, run.device)
    sampler = EpochSampler(len(data), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    start_step = checkpoint_step(resume_from) if resume_from is not None else 0
    reference, reference_pass = fill_kto_reference(
        run, config, policy=policy, packed=packed, data=data, sampler=sampler,
        start_step=start_step, total_steps=total_steps, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    optimizer = build_optimizer(policy.parameters(), config, run.device)
    scheduler = build_scheduler(optimizer, config, total_steps)
    if resume_from is not None:
        start_step, _ = run.restore_training_state(
            resume_from, optimizer=optimizer, scheduler=scheduler
        )
    return KTOState(
        run=run, config=config, tokenizer=tokenizer, model=policy, sampler=sampler,
        total_steps=total_steps, start_step=start_step, optimizer=optimizer, scheduler=scheduler,
        data=data, weights=weights, packed=packed, reference=reference,
        reference_pass=reference_pass,
    )  # fmt: skip


def fill_kto_reference(
    run: Run,
    config: KTOConfig,
    *,
    policy: Any,
    packed: bool,
    data: KTOSequences,
    sampler: EpochSampler,
    start_step: int,
    total_steps: int,
    pad_token_id: int,
) -> tuple[KTOReference, KTOReferencePass]:
    """The reference table this run needs: the cache's, plus a pass over what it lacks (rank 0
    computes and writes the cache, the other ranks read it), reported as ``REFERENCE_PHASE``."""
    started = time.perf_counter()
    cache_path = reference_cache_path(
        config,
        run.output_dir,
        table="kto",
        key_prefix="kto|",
        data_sha256=file_sha256(data_file(config)),
        reference_sha256=model_fingerprint(Path(config.ref_model or config.model)),
        encoder=data.encoder,
    )
    reference = KTOReference.load(cache_path, len(data)) or KTOReference.empty(len(data))
    cached = int(reference.known.sum()) + len(reference.mismatched)
    at_reference = config.ref_model is None and run.resume_from is None and config.disable_dropout
    fill_first_step = at_reference and run.ranks.world == 1
    work = kto_reference_work(
        sampler, reference, start_step=start_step, total_steps=total_steps,
        micro_batch_size=config.micro_batch_size or config.batch_size,
        fill_first_step=fill_first_step, first_step_at_reference=at_reference,
    )  # fmt: skip
    reference = reference_pass(
        run,
        config,
        policy=policy,
        table=reference,
        has_work=bool(work),
        compute=lambda model: compute_kto_reference(
            model, data, work, reference, run=run, packed=packed, pad_token_id=pad_token_id
        ),
        cache_path=cache_path,
        load=lambda path: KTOReference.load(path, len(data)),
    )
    total = int(reference.known.sum()) + len(reference.mismatched)
    return reference, KTOReferencePass(
        cache_path=cache_path,
        cached=cached,
        computed=total - cached,
        seconds=time.perf_counter() - started,
        fill_first_step=fill_first_step,
        first_step_at_reference=at_reference,
    )


def compute_kto_reference(
    model: Any,
    data: KTOSequences,
    work: list[ReferenceWork],
    reference: KTOReference,
    *,
    run: Run,
    packed: bool,
    pad_token_id: int,
) -> None:
    """Fill ``reference`` with ``model``'s log-probabilities of ``work`` (no gradients, eval
    mode), one forward per micro-batch of examples with a micro-batch of mismatched sequences
    (packed, each example's prompt is held once for both), one progress call per step."""
    was_training = model.training
    model.eval()
    forward = {"packed": packed, "pad_token_id": pad_token_id, "device": run.device}
    run.callback.on_phase(phase=REFERENCE_PHASE, done=0, total=len(work))
    with torch.inference_mode(), autocast(run.device, run.config.bf16):
        for done, step in enumerate(work, start=1):
            # An example and its mismatched sequence share a prompt: one forward holds it once.
            for group, keys in zip_longest(step.examples, step.mismatched, fillvalue=[]):
                sequences = [data.sequences[i] for i in group] + [data.mismatched(k) for k in keys]
                totals, _, _ = forward_sequences(model, sequences, **forward)
                if group:
                    reference.fill_examples(group, totals[: len(group)])
                if keys:
                    reference.fill_mismatched(keys, totals[len(group) :])
            run.callback.on_phase(phase=REFERENCE_PHASE, done=done, total=len(work))
    model.train(was_training)


def kl_estimate(state: KTOState, at: Position) -> float:
    """z0 of the step at ``at`` (see the module docstring): 0.0 at step 1 when the policy is the
    reference, else the batch's mean of log pi - log pi_ref over its mismatched sequences, this
    rank's share run without gradients and the sums added over ranks."""
    if state.reference_pass.first_step_at_reference and at.step == 1:
        return 0.0
    run, config = state.run, state.config
    keys = mismatched_keys(state.sampler, at.epoch, at.batch_index)
    policy, reference = [], []
    with torch.no_grad(), autocast(run.device, config.bf16):
        for group in chunks(run.ranks.shard(keys), state.micro_batch_size):
            totals, _, _ = forward_sequences(
                state.model,
                [state.data.mismatched(k) for k in group],
                packed=state.packed,
                pad_token_id=state.tokenizer.pad_token_id,
                device=run.device,
            )
            policy.append(totals.float().cpu())
            reference.append(state.reference.mismatched_values(list(group)))
    total = 0.0
    if policy:
        policy_logps, ref_logps = torch.cat(policy), torch.cat(reference)
        total = float(kto_kl_estimate(policy_logps, ref_logps)) * policy_logps.numel()
    return all_reduce_sum({"kl": total}, run.ranks, run.device)["kl"] / len(keys)


def kto_micro_batch(
    state: KTOState, index: list[int], *, kl: float, step_examples: int, fill_reference: bool
) -> dict[str, float]:
    """Forward and backward for the examples ``index``; returns their metric sums (METRIC_SUMS),
    to be divided by the step's example count ``step_examples``. With ``fill_reference`` (step 1,
    policy = reference) the forward's own detached log-probs become the examples' reference
    values before the loss reads them."""
    config, device = state.config, state.run.device
    with autocast(device, config.bf16):
        totals, _, n_tokens = forward_sequences(
            state.model,
            [state.data.sequences[i] for i in index],
            packed=state.packed,
            pad_token_id=state.tokenizer.pad_token_id,
            device=device,
        )
    if fill_reference:
        new = [k for k, i in enumerate(index) if not state.reference.known[i]]
        if new:
            rows = torch.tensor(new, device=totals.device)
            state.reference.fill_examples([index[k] for k in new], totals.index_select(0, rows))
    desirable = state.data.desirable[index].to(totals.device)
    out = kto_loss(
        totals,
        state.reference.example_values(index).to(totals.device),
        desirable,
        kl_estimate=kl,
        beta=config.beta,
        desirable_weight=state.weights[0],
        undesirable_weight=state.weights[1],
    )
    (out.losses.sum() / step_examples).backward()
    logps = totals.detach().float()
    return {
        "loss": float(out.losses.detach().sum()),
        "rewards/desirable": float(out.rewards[desirable].sum()),
        "rewards/undesirable": float(out.rewards[~desirable].sum()),
        "logps/desirable": float(logps[desirable].sum()),
        "logps/undesirable": float(logps[~desirable].sum()),
        "desirable": float(desirable.sum()),
        "undesirable": float((~desirable).sum()),
        "tokens": float(n_tokens),
    }


def kto_step(state: KTOState, at: Position, throughput: Throughput) -> StepOutcome:
    """One optimiser step on the sampler's batch at ``at``: the KL estimate, then this rank's
    micro-batches forward and backward, metric sums over every rank, one clipped step."""
    run, reference_pass = state.run, state.reference_pass
    index = state.sampler.batch(at.epoch, at.batch_index)
    fill = reference_pass.fill_first_step and at.step == 1
    known_before = int(state.reference.known.sum())
    with throughput.timing():
        kl = kl_estimate(state, at)
        sums = dict.fromkeys(METRIC_SUMS, 0.0)
        for group in chunks(run.ranks.shard(index), state.micro_batch_size):
            part = kto_micro_batch(
                state, list(group), kl=kl, step_examples=len(index), fill_reference=fill
            )
            sums = {k: sums[k] + part[k] for k in METRIC_SUMS}
        sums = all_reduce_sum(sums, run.ranks, run.device)
        grad_norm = optimizer_step(
            state.model.parameters(), state.optimizer, state.scheduler,
            state.config.max_grad_norm, run.ranks,
        )  # fmt: skip
        if fill:
            reference_pass.computed += int(state.reference.known.sum()) - known_before
            state.reference.save(reference_pass.cache_path)  # step 1's examples
    throughput.items += len(index)
    throughput.tokens += int(sums["tokens"])
    return StepOutcome(kto_metrics(sums, kl, len(index)) | {
        "grad_norm": grad_norm, "learning_rate": state.scheduler.get_last_lr()[0]
    })  # fmt: skip


def kto_metrics(sums: dict[str, float], kl: float, n_examples: int) -> dict[str, float]:
    """A step's metrics from its sums over ``n_examples`` examples (see the module docstring)."""
    n_desirable, n_undesirable = sums["desirable"], sums["undesirable"]
    metrics = {"loss": sums["loss"] / n_examples, "kl_estimate": kl}
    for kind, count in (("desirable", n_desirable), ("undesirable", n_undesirable)):
        for name in (f"rewards/{kind}", f"logps/{kind}"):
            metrics[name] = sums[name] / count if count else 0.0
    both = n_desirable > 0 and n_undesirable > 0
    margin = metrics["rewards/desirable"] - metrics["rewards/undesirable"]
    metrics["rewards/margin"] = margin if both else 0.0
    metrics["desirable_fraction"] = n_desirable / n_examples
    return metrics


def kto_summary(state: KTOState, end: LoopEnd) -> dict[str, Any]:
    """The run's summary: data and weights, what the reference pass did, rates, last metrics."""
    throughput, reference_pass = end.throughput, state.reference_pass
    train_seconds, reference_seconds = throughput.seconds, reference_pass.seconds
    n_desirable = int(state.data.desirable.sum())
    whole = train_seconds + reference_seconds
    return {
        "kind": "kto",
        "examples": len(state.data),
        "desirable_examples": n_desirable,
        "undesirable_examples": len(state.data) - n_desirable,
        "desirable_weight": state.weights[0],
        "undesirable_weight": state.weights[1],
        "examples_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": train_seconds,
        "reference_seconds": reference_seconds,
        "reference_cached": reference_pass.cached,
        "reference_computed": reference_pass.computed,
        "reference_first_step_filled": reference_pass.fill_first_step,
        **state.data.encoder.fit.summary(),
        # Whole-run rates count the reference pass too: it is work this run had to do.
        "examples_per_second": throughput.items / whole if throughput.items else 0.0,
        "tokens_per_second": throughput.tokens / whole if throughput.tokens else 0.0,
        "train_examples_per_second": throughput.per_second(throughput.items),
        "train_tokens_per_second": throughput.per_second(throughput.tokens),
        "packed": state.packed,
        "bf16": state.config.bf16,
        "peak_memory_bytes": peak_memory_bytes(state.run.device),
        "last_metrics": end.last_logged,
    }

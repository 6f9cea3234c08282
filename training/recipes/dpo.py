"""DPO recipe: preference pairs -> a policy, against reference log-probabilities computed once.

Per optimiser step: for each micro-batch, chosen and rejected sequences go through the policy in one
packed forward (no padding; logits only at completion positions), the DPO loss is summed over pairs
and divided by the step's pair count (so gradient accumulation is exact), then one clipped AdamW step.

The reference model never changes, so its log-probabilities are computed once and cached on disk
under a key made of the data file's hash, the reference weights' hash, the tokenisation and the
precision. When the reference is the starting policy (the default), no second model is loaded, and
the first step's pairs need no reference pass at all: until the first update the policy is the
reference, so the first step's own forward (same layout, dropout off) gives their reference values
exactly. Only the rest of the first epoch's pairs run through the reference pass before training.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.algorithms import dpo_loss
from training.algorithms.logprobs import segment_sum
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import DPOConfig
from training.recipes.data import (
    ChatEncoder,
    EpochSampler,
    chunks,
    file_sha256,
    load_preference_pairs,
)
from training.recipes.distributed import all_reduce_sum, barrier
from training.recipes.loop import finish_run, mean_metrics, optimizer_step, start_run
from training.recipes.models import load_causal_lm, load_policy, load_tokenizer, model_fingerprint
from training.recipes.packing import (
    TokenizedSequence,
    build_batch,
    can_share_prompts,
    completion_token_logprobs,
)
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    build_optimizer,
    build_scheduler,
    memory_fraction,
    peak_memory_bytes,
    total_steps_for,
)


@dataclass
class ReferenceLogps:
    """Per pair: summed reference log-probabilities and completion token counts, [P] each."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor

    def fill(self, index: list[int], totals: torch.Tensor, lengths: torch.Tensor) -> None:
        """Set pairs ``index`` from one forward's outputs: totals, lengths [2m] (chosen, rejected)."""
        m = len(index)
        totals, lengths = totals.float().cpu(), lengths.cpu()
        self.chosen[index], self.rejected[index] = totals[:m], totals[m:]
        self.chosen_tokens[index], self.rejected_tokens[index] = lengths[:m], lengths[m:]

    def select(self, index: list[int], *, average: bool) -> tuple[torch.Tensor, torch.Tensor]:
        chosen, rejected = self.chosen[index], self.rejected[index]
        if average:
            chosen = chosen / self.chosen_tokens[index].clamp(min=1)
            rejected = rejected / self.rejected_tokens[index].clamp(min=1)
        return chosen, rejected


PairTokens = tuple[TokenizedSequence, TokenizedSequence]
METRIC_SUMS = (
    "loss",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracy",
    "rewards/margin",
    "logps/chosen",
    "logps/rejected",
    "tokens",
)


def _forward_pairs(
    model: Any, pairs: list[PairTokens], *, packed: bool, pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One concatenated forward: [chosen_1..m, rejected_1..m] -> (summed log-probs [2m], completion
    token counts [2m], tokens in the sequences). Packed, each pair's prompt runs once for both."""
    sequences = [c for c, _ in pairs] + [r for _, r in pairs]
    batch = build_batch(
        sequences,
        packed=packed,
        pad_token_id=pad_token_id,
        device=device,
        share_prompts=packed and can_share_prompts(model),
    )
    per_token = completion_token_logprobs(model, batch)
    totals = segment_sum(per_token, batch.segment_ids, batch.n_sequences)
    # Throughput counts the pairs' tokens (each prompt once per response), not the fewer tokens the
    # shared layout runs, so rates compare with tools that do not share prompts.
    return totals, batch.completion_lengths, sum(len(s.input_ids) for s in sequences)


def compute_reference_logps(
    model: Any,
    pairs: list[PairTokens],
    groups: list[list[int]],
    *,
    packed: bool,
    pad_token_id: int,
    device: torch.device,
    bf16: bool,
) -> ReferenceLogps:
    """Reference log-probabilities of every pair, without gradients, one forward per group of pair
    indices. The recipe passes the first epoch's micro-batches: the same batch layout as the first
    training steps, so under bf16 (where a different layout rounds differently) step 1 still sees
    policy = reference exactly."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(2, len(pairs))
    counts = torch.zeros(2, len(pairs), dtype=torch.long)
    with torch.inference_mode(), autocast(device, bf16):
        for group in groups:
            totals, lengths, _ = _forward_pairs(
                model,
                [pairs[i] for i in group],
                packed=packed,
                pad_token_id=pad_token_id,
                device=device,
            )
            sums[:, group] = totals.view(2, len(group)).float().cpu()
            counts[:, group] = lengths.view(2, len(group)).cpu()
    model.train(was_training)
    return ReferenceLogps(sums[0], sums[1], counts[0], counts[1])


def reference_cache_key(
    *, data_sha256: str, reference_sha256: str, encoder: ChatEncoder, bf16: bool
) -> str:
    material = f"{data_sha256}|{reference_sha256}|{encoder.fingerprint()}|bf16={bf16}"
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def load_cached_reference(path: Path, n_pairs: int) -> ReferenceLogps | None:
    if not path.is_file():
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if saved["chosen"].shape[0] != n_pairs:
        return None
    return ReferenceLogps(
        saved["chosen"], saved["rejected"], saved["chosen_tokens"], saved["rejected_tokens"]
    )


def save_cached_reference(path: Path, reference: ReferenceLogps) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(
        {
            "chosen": reference.chosen,
            "rejected": reference.rejected,
            "chosen_tokens": reference.chosen_tokens,
            "rejected_tokens": reference.rejected_tokens,
        },
        partial,
    )
    partial.replace(path)


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
        totals, lengths, n_tokens = _forward_pairs(
            policy,
            [pairs[i] for i in index],
            packed=packed,
            pad_token_id=pad_token_id,
            device=device,
        )
    m = len(index)
    if fill_reference:
        reference.fill(index, totals.detach(), lengths)
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
    return {  # sums over the micro-batch, keys as METRIC_SUMS
        "loss": float(losses.detach().sum()),
        "rewards/chosen": float(chosen_rewards.sum()),
        "rewards/rejected": float(rejected_rewards.sum()),
        "rewards/accuracy": float((chosen_rewards > rejected_rewards).float().sum()),
        "rewards/margin": float((chosen_rewards - rejected_rewards).sum()),
        "logps/chosen": float(totals[:m].detach().sum()),
        "logps/rejected": float(totals[m:].detach().sum()),
        "tokens": float(n_tokens),
    }


def train_dpo(config: DPOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run DPO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    run = start_run(config, callback)
    device = run.device
    tokenizer = load_tokenizer(config.model)
    encoder = ChatEncoder(
        tokenizer, max_length=config.max_length, prompt_budget=config.prompt_budget
    )
    raw_pairs = load_preference_pairs(config.data)
    pairs = [
        (encoder.encode(p.prompt, p.chosen), encoder.encode(p.prompt, p.rejected))
        for p in raw_pairs
    ]
    micro = config.micro_batch_size or config.batch_size
    resume_from = run.resume_from
    policy, packed = load_policy(resume_from or config.model, config, device)
    pad_id = tokenizer.pad_token_id

    sampler = EpochSampler(len(pairs), config.batch_size, config.seed)
    started = time.perf_counter()
    reference_path = Path(config.ref_model or config.model)
    cache_dir = Path(config.reference_cache_dir or run.output_dir / "reference-cache")
    key = reference_cache_key(
        data_sha256=file_sha256(config.data),
        reference_sha256=model_fingerprint(reference_path),
        encoder=encoder,
        bf16=config.bf16,
    )
    cache_path = cache_dir / f"dpo-reference-{key}.pt"
    reference = load_cached_reference(cache_path, len(pairs))
    cache_hit = reference is not None
    same_model = config.ref_model is None and resume_from is None
    # The first step's pairs take their reference values from the first step's forward (see the
    # module docstring); one process only, so that every pair is filled where it is trained.
    fill_first_step = (
        reference is None and same_model and config.disable_dropout and run.ranks.world == 1
    )
    if reference is None and run.ranks.main:
        ref_model = (
            policy
            if same_model
            else load_causal_lm(
                reference_path, device=device, packing=config.packing, trainable=False
            )[0]
        )
        first_epoch = [sampler.batch(0, b) for b in range(sampler.batches_per_epoch)]
        reference = compute_reference_logps(
            ref_model,
            pairs,
            [
                list(group)
                for batch in first_epoch[1 if fill_first_step else 0 :]
                for group in chunks(batch, micro)
            ],
            packed=packed,
            pad_token_id=pad_id,
            device=device,
            bf16=config.bf16,
        )
        del ref_model
        if not fill_first_step:
            save_cached_reference(cache_path, reference)
    barrier(run.ranks)  # the other ranks read what rank 0 computed
    if reference is None:
        reference = load_cached_reference(cache_path, len(pairs))
    if reference is None:
        raise RuntimeError(
            f"rank {run.ranks.rank}: rank 0 wrote no reference cache at {cache_path}"
        )
    reference_seconds = time.perf_counter() - started

    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    optimizer = build_optimizer(policy.parameters(), config, device)
    scheduler = build_scheduler(optimizer, config, total_steps)
    start_step = 0
    if resume_from is not None:
        state, _ = run.checkpoints.restore(resume_from, optimizer=optimizer, scheduler=scheduler)
        start_step = state.step

    run.callback.on_start(total_steps=total_steps, config=config.to_dict())
    throughput = Throughput()
    pending: list[dict[str, float]] = []
    last_logged: dict[str, float] | None = None
    status, step = "completed", start_step
    for step_index, epoch, batch_index in sampler.positions(start_step, total_steps):
        step = step_index + 1
        index = sampler.batch(epoch, batch_index)
        with throughput.timing():
            sums = dict.fromkeys(METRIC_SUMS, 0.0)
            for group in chunks(run.ranks.shard(index), micro):
                part = _dpo_micro_batch(
                    policy,
                    pairs,
                    list(group),
                    reference,
                    config,
                    step_pairs=len(index),
                    packed=packed,
                    pad_token_id=pad_id,
                    device=device,
                    fill_reference=fill_first_step and step == 1,
                )
                sums = {k: sums[k] + v for k, v in part.items()}
            sums = all_reduce_sum(sums, run.ranks, device)
            grad_norm = optimizer_step(
                policy.parameters(), optimizer, scheduler, config.max_grad_norm, run.ranks
            )
            if fill_first_step and step == 1:
                save_cached_reference(cache_path, reference)  # now complete
        throughput.items += len(index)
        throughput.tokens += int(sums["tokens"])
        metrics = {k: v / len(index) for k, v in sums.items() if k != "tokens"}
        metrics.update(grad_norm=grad_norm, learning_rate=scheduler.get_last_lr()[0])
        pending.append(metrics)
        run.callback.on_step(step=step, total_steps=total_steps)
        if step % config.log_every == 0 or step == total_steps:
            logged = mean_metrics(pending)
            logged.update(
                epoch=epoch + (batch_index + 1) / sampler.batches_per_epoch,
                pairs_per_second=throughput.per_second(throughput.items),
                tokens_per_second=throughput.per_second(throughput.tokens),
            )
            fraction = memory_fraction(device)
            if fraction is not None:
                logged["memory_fraction"] = fraction
            run.callback.on_log(step=step, metrics=logged)
            pending, last_logged = [], logged
        stop = run.stop_requested()
        if run.checkpoints.due(step) or (stop and step < total_steps):
            run.save_checkpoint(
                step=step,
                model=policy,
                tokenizer=tokenizer,
                optimizer=optimizer,
                scheduler=scheduler,
                trainer_state={"epoch": epoch, "batch_in_epoch": batch_index + 1, "kind": "dpo"},
            )
        if stop and step < total_steps:
            status = "cancelled"
            break

    train_seconds = throughput.seconds
    summary = {
        "kind": "dpo",
        "pairs": len(pairs),
        "pairs_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": train_seconds,
        "reference_seconds": reference_seconds,
        "reference_cache_hit": cache_hit,
        # Whole-run rates count the reference pass too: it is work this run had to do.
        "pairs_per_second": throughput.items / (train_seconds + reference_seconds)
        if throughput.items
        else 0.0,
        "tokens_per_second": throughput.tokens / (train_seconds + reference_seconds)
        if throughput.tokens
        else 0.0,
        "train_pairs_per_second": throughput.per_second(throughput.items),
        "train_tokens_per_second": throughput.per_second(throughput.tokens),
        "packed": packed,
        "bf16": config.bf16,
        "peak_memory_bytes": peak_memory_bytes(device),
        "last_metrics": last_logged,
    }
    return finish_run(
        run, status=status, step=step, model=policy, tokenizer=tokenizer, summary=summary
    )

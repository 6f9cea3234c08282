"""Reward models from ranked lists and rated responses (issue #32), and the reward-model loader every
reward-model recipe shares (``load_reward_model``).

``loss = "plackett_luce"`` trains the one-output reward model on listwise rows (``ranked_data``):
each step scores every response of the batch's lists in one forward and minimises the Plackett-Luce
negative log-likelihood of the given ranks (``training.algorithms.plackett_luce_loss``, Breslow
ties); the model is a plain reward model, scored as one. ``loss = "aspect_regression"`` trains a
head with one output per aspect seen in the regression rows (HelpSteer2 style) on the mean squared
error of the scale-normalised ratings, an aspect a row did not rate masked out; the final folder
holds ``aspects.json`` (``aspect_head.AspectHead``: the aspects in output order and the weights of
the weighted sum that ``scoring.RewardScorer`` gives as the reward to PPO, RLOO and GRPO).

Both hold out ``eval_fraction`` of the rows and report ``eval/loss`` on them, with the held-out
share of implied pairs the model orders as ranked (``eval/accuracy``, lists) or the mean absolute
error on the normalised scale (``eval/mae``, ratings).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.algorithms import aspect_regression_loss, plackett_luce_loss
from training.recipes.aspect_head import ASPECTS_FILE, AspectHead, resolve_weights
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import RewardModelConfig
from training.recipes.data import EpochSampler, FitLog, chunks, split_eval
from training.recipes.loop import (
    LoopEnd,
    PairRecipeState,
    Position,
    Run,
    StepOutcome,
    finish_run,
    reduce_and_step,
    run_pair_steps,
    start_run,
)
from training.recipes.models import (
    disable_dropout,
    enable_activation_checkpointing,
    load_tokenizer,
    require_same_lora,
    with_lora,
)
from training.recipes.ranked_data import load_ranked_lists, load_rated_responses
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    build_optimizer,
    build_scheduler,
    peak_memory_bytes,
    total_steps_for,
)
from training.recipes.scoring import RewardInput, RewardScorer, load_sequence_classifier

# The work before the first step, reported to the run page as phases (``on_phase``).
LOADING_PHASE = "loading the reward model"
TOKENISING_PHASE = "tokenising pairs"


def load_reward_model(
    run: Run, config: RewardModelConfig, *, num_labels: int | None = None
) -> tuple[Any, Any, RewardScorer]:
    """Tokenizer, sequence classifier (from the checkpoint when resuming) in training mode, and
    the scorer that fits and scores inputs for it. ``num_labels``: the head's outputs (None: 1, or
    K for a heads ensemble of ``ensemble_size`` K)."""
    tokenizer = load_tokenizer(config.model)
    path = run.resume_from or config.warm_start or config.model
    resuming_adapters = require_same_lora(path, config)
    if num_labels is None:
        num_labels = config.ensemble_size if config.ensemble_mode == "heads" else 1
    model = load_sequence_classifier(
        config.model if resuming_adapters else path,
        device=run.device,
        tokenizer=tokenizer,
        packing=config.packing,  # decoders with a chat template, and BERT-family encoders
        num_labels=num_labels,
    )
    adapters = Path(path) if resuming_adapters else None
    model = with_lora(model, config, adapters=adapters, task="sequence_classification")
    if config.gradient_checkpointing:
        enable_activation_checkpointing(model)
    if config.disable_dropout:
        disable_dropout(model)
    model.train()
    scorer = RewardScorer(
        model,
        tokenizer,
        max_length=config.max_length,
        prompt_budget=config.prompt_budget,
        fit=FitLog("pairs"),
    )
    return tokenizer, model, scorer


# --- Objectives: what a batch of rows costs ----------------------------------------------------------
@dataclass
class ListwiseObjective:
    """Plackett-Luce over ranked lists. ``ranks``: per list, the rank of each response."""

    ranks: list[tuple[float, ...]]
    noun: str = "lists"

    def batch(self, outputs: torch.Tensor, group: Sequence[int]) -> tuple[torch.Tensor, dict]:
        """outputs [1, S]: the rewards of the group's lists' responses one list after another ->
        (mean loss over the lists, metric sums over the lists: loss, accuracy)."""
        sizes = [len(self.ranks[i]) for i in group]
        width = max(sizes)
        scores = outputs.new_zeros(len(group), width)
        ranks = torch.zeros(len(group), width)
        mask = torch.zeros(len(group), width, dtype=torch.bool)
        for row, (rewards, i) in enumerate(zip(outputs[0].split(sizes), group, strict=True)):
            scores[row, : sizes[row]] = rewards
            ranks[row, : sizes[row]] = torch.tensor(self.ranks[i])
            mask[row, : sizes[row]] = True
        ranks, mask = ranks.to(scores.device), mask.to(scores.device)
        loss = plackett_luce_loss(scores, ranks, mask)
        return loss, {
            "loss": float(loss.detach()) * len(group),
            "accuracy": float(_pair_accuracy(scores.detach(), ranks, mask).sum()),
        }


def _pair_accuracy(scores: torch.Tensor, ranks: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per list [B]: the share of its strictly ranked pairs whose better response scores higher."""
    valid = mask[:, :, None] & mask[:, None, :]
    better = (ranks[:, :, None] < ranks[:, None, :]) & valid
    right = better & (scores[:, :, None] > scores[:, None, :])
    return right.sum(dim=(1, 2)) / better.sum(dim=(1, 2)).clamp(min=1)


@dataclass
class AspectObjective:
    """Masked MSE of the aspect outputs. ``targets``, ``rated``: [N, A] normalised ratings and
    whether each row rated each aspect."""

    targets: torch.Tensor
    rated: torch.Tensor
    noun: str = "rows"

    def batch(self, outputs: torch.Tensor, group: Sequence[int]) -> tuple[torch.Tensor, dict]:
        """outputs [A, S]: the aspect predictions of the group's rows -> (the MSE over the rated
        cells, metric sums over the rows: loss, mae)."""
        predictions = outputs.T
        targets = self.targets[list(group)].to(predictions.device)
        rated = self.rated[list(group)].to(predictions.device)
        loss = aspect_regression_loss(predictions, targets, rated)
        errors = torch.where(rated, (predictions.detach() - targets).abs(), 0.0)
        mae = errors.sum() / rated.sum().clamp(min=1)
        return loss, {"loss": float(loss.detach()) * len(group), "mae": float(mae) * len(group)}


@dataclass
class RowRewardState(PairRecipeState):
    """A ranked-list or rated-response run between steps: the scorer of ``model``, each row's
    fitted inputs (``encoded``: a list's responses, or the one rated response), the split, the
    objective, and for aspect regression the head's description."""

    config: RewardModelConfig
    scorer: RewardScorer
    encoded: list[tuple[RewardInput, ...]]
    train_index: list[int]
    eval_index: list[int]
    objective: ListwiseObjective | AspectObjective
    skipped: int = 0
    head: AspectHead | None = None


def train_row_reward_model(
    config: RewardModelConfig, callback: TrainingCallback | None = None
) -> TrainResult:
    """Train a reward model on ranked lists (``plackett_luce``) or rated responses
    (``aspect_regression``); resumes from the newest checkpoint when allowed."""
    run = start_run(config, callback)
    state = setup_row_reward_model(run, config)
    end = run_pair_steps(state, "rm", row_reward_step, rate_name=state.objective.noun)
    evaluation = _held_out_metrics(state) if state.eval_index else {}
    if evaluation:
        run.callback.on_log(step=end.step, metrics=evaluation)
    files: dict[str, Any] = {"reward_stats.json": evaluation} if evaluation else {}
    if state.head is not None:
        files[ASPECTS_FILE] = state.head.payload()
    return finish_run(
        run,
        status=end.status,
        step=end.step,
        model=state.model,
        tokenizer=state.tokenizer,
        summary=_summary(state, end, evaluation),
        extra_files=files,
    )


def _rows(
    config: RewardModelConfig,
) -> tuple[
    list[Any], list[tuple[str, ...]], ListwiseObjective | AspectObjective, AspectHead | None, int
]:
    """The file's rows, each row's responses, the objective and (aspects) the head's description,
    and how many rows were skipped."""
    if config.loss == "plackett_luce":
        lists, skipped = load_ranked_lists(config.data)
        objective = ListwiseObjective([row.ranks for row in lists])
        return lists, [row.responses for row in lists], objective, None, skipped
    rated, aspects = load_rated_responses(config.data)
    try:
        head = AspectHead(aspects, resolve_weights(aspects, config.aspect_weights))
    except ValueError as error:
        raise ValueError(f"{config.data}: {error}") from None
    targets = torch.tensor([[row.targets.get(a, 0.0) for a in aspects] for row in rated])
    mask = torch.tensor([[a in row.targets for a in aspects] for row in rated])
    return rated, [(row.response,) for row in rated], AspectObjective(targets, mask), head, 0


def setup_row_reward_model(run: Run, config: RewardModelConfig) -> RowRewardState:
    """The rows and their split, the model (A outputs for aspect regression), optimiser and
    schedule, restored to where the run stopped."""
    rows, responses, objective, head, skipped = _rows(config)
    run.callback.on_phase(phase=LOADING_PHASE, done=0, total=0)
    num_labels = 1 if head is None else len(head.aspects)
    tokenizer, model, scorer = load_reward_model(run, config, num_labels=num_labels)
    if head is not None:  # the saved config names each output too
        model.config.id2label = dict(enumerate(head.aspects))
        model.config.label2id = {name: i for i, name in enumerate(head.aspects)}
    encoded = []
    for index, (row, texts) in enumerate(zip(rows, responses, strict=True)):
        if index % config.batch_size == 0:
            run.callback.on_phase(phase=TOKENISING_PHASE, done=index, total=len(rows))
        encoded.append(scorer.encode_list(row.prompt, texts))
    run.callback.on_phase(phase=TOKENISING_PHASE, done=len(rows), total=len(rows))
    train_index, eval_index = split_eval(len(rows), config.eval_fraction, config.seed)
    if not train_index:
        raise ValueError(f"{config.data}: no rows left to train on after the eval split")
    sampler = EpochSampler(len(train_index), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    optimizer = build_optimizer(model.parameters(), config, run.device)
    state = RowRewardState(
        run=run,
        config=config,
        tokenizer=tokenizer,
        model=model,
        scorer=scorer,
        encoded=encoded,
        train_index=train_index,
        eval_index=eval_index,
        objective=objective,
        skipped=skipped,
        head=head,
        sampler=sampler,
        total_steps=total_steps,
        start_step=0,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, config, total_steps),
    )
    state.start_step, _ = run.restore_training_state(
        run.resume_from, optimizer=optimizer, scheduler=state.scheduler
    )
    return state


def _group_outputs(state: RowRewardState, group: Sequence[int]) -> torch.Tensor:
    """Every output of the model for the group's inputs, one row after another: [outputs, S]."""
    return state.scorer.score_members([x for i in group for x in state.encoded[i]])


def row_reward_step(state: RowRewardState, at: Position, throughput: Throughput) -> StepOutcome:
    """One optimiser step on the rows of the sampler's batch at ``at``: this rank's micro-batches
    forward and backward, metric sums over every rank, one step."""
    config, run = state.config, state.run
    index = [state.train_index[i] for i in state.sampler.batch(at.epoch, at.batch_index)]
    sums: dict[str, float] = {}
    tokens = 0.0
    with throughput.timing():
        for group in chunks(run.ranks.shard(index), state.micro_batch_size):
            with autocast(run.device, config.bf16):
                outputs = _group_outputs(state, group)
            loss, metrics = state.objective.batch(outputs, group)
            (loss * len(group) / len(index)).backward()
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + value
            tokens += sum(len(x.input_ids) for i in group for x in state.encoded[i])
        return reduce_and_step(state, sums, tokens=tokens, items=len(index), throughput=throughput)


def _held_out_metrics(state: RowRewardState) -> dict[str, float]:
    """The objective's metrics on the held-out rows, in eval mode: ``eval/<name>``."""
    was_training = state.model.training
    state.model.eval()
    sums: dict[str, float] = {}
    with torch.inference_mode(), autocast(state.run.device, state.config.bf16):
        for group in chunks(list(state.eval_index), state.micro_batch_size):
            _, metrics = state.objective.batch(_group_outputs(state, group).float(), group)
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + value
    state.model.train(was_training)
    n = len(state.eval_index)
    return {f"eval/{name}": value / n for name, value in sums.items()} | {
        f"eval/{state.objective.noun}": n
    }


def _summary(state: RowRewardState, end: LoopEnd, evaluation: dict[str, float]) -> dict[str, Any]:
    throughput, noun = end.throughput, state.objective.noun
    summary = {
        "kind": "rm",
        "loss": state.config.loss,
        noun: len(state.encoded),
        f"train_{noun}": len(state.train_index),
        f"eval_{noun}": len(state.eval_index),
        f"{noun}_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": throughput.seconds,
        f"{noun}_per_second": throughput.per_second(throughput.items),
        "tokens_per_second": throughput.per_second(throughput.tokens),
        **state.scorer.fit.summary(),
        "bf16": state.config.bf16,
        "peak_memory_bytes": peak_memory_bytes(state.run.device),
        **evaluation,
    }
    if state.skipped:
        summary["skipped_all_tied"] = state.skipped
    if state.head is not None:
        summary["aspects"] = dict(zip(state.head.aspects, state.head.weights, strict=True))
    return summary

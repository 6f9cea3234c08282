"""Reward model recipe: a one-output sequence-classification head on any registered encoder or decoder,
trained with the Bradley-Terry loss on preference pairs (ranked lists and rated responses, the
``loss`` options "plackett_luce" and "aspect_regression", train in ``reward_rows``).

Decoders (SmolLM2) read the reward at the last token of prompt + response rendered with the chat
template, in packed batches when the architecture allows; encoders (MiniLM) read it from the pooled
first token of the pair ``[CLS] prompt [SEP] response [SEP]``, unpadded for BERT-family models (linear
layers on the real tokens only). The trained model is a plain ``AutoModelForSequenceClassification``
folder; ``scoring.RewardScorer`` scores new responses the same way (and trains through here).

PIPELINE.md's annotator-aware reward model, as two options: ``annotator_aware`` trains on every
annotator's own vote instead of the consensus, through a per-annotator reliability scale and side bias
(``AnnotatorBiasHead``) that is dropped afterwards; ``cluster_conditioning`` adds a learned embedding
of the prompt's cluster to every input token (``ClusterConditioning``), saved beside the model as
``cluster_conditioning.json``. With either, a plain model is trained first and its held-out accuracy
is reported next to the conditioned one's.

A reward ensemble (``ensemble_size`` K > 1, issue #33) trains K members on bootstrap resamples of the
training pairs (``training.algorithms.bootstrap_counts``, seeded): ``ensemble_mode`` "heads" is one
shared encoder with K output heads (each head's Bradley-Terry loss weighted by its resample's
counts, ``bootstrap_weighted_bt``); "independent" trains K separately initialised plain reward
models (seeds ``seed + k``) one after another, each on its resample, all holding out the same pairs.
The final folder holds ``ensemble.json`` (``scoring.EnsembleManifest``, read by
``scoring.load_reward_ensemble``); held-out metrics give the ensemble mean's accuracy and each
member's (``ensemble_eval_metrics``). K = 1 is the plain recipe, number for number.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from training.algorithms import bootstrap_counts, bootstrap_weighted_bt, bradley_terry_loss
from training.recipes.annotator_head import AnnotatorBiasHead, VoteTable, annotator_loss
from training.recipes.callbacks import TrainingCallback
from training.recipes.cluster_conditioning import CONDITIONING_FILE, ClusterConditioning
from training.recipes.config import RewardModelConfig
from training.recipes.data import (
    AnnotatorVote,
    EpochSampler,
    chunks,
    judgements_file_for,
    load_judged_pairs,
    split_eval,
)
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
from training.recipes.reward_ensemble import (
    MEMBER_EVAL_FILE,
    EnsembleMember,
    ensemble_eval_metrics,
    train_independent_ensemble,
)
from training.recipes.reward_rows import (
    LOADING_PHASE,
    TOKENISING_PHASE,
    load_reward_model,
    train_row_reward_model,
)
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    build_optimizer,
    build_scheduler,
    peak_memory_bytes,
    total_steps_for,
)
from training.recipes.scoring import (
    ENSEMBLE_FILE,
    EnsembleManifest,
    RewardInput,
    RewardScorer,
)


def _pair_member_rewards(
    scorer: RewardScorer,
    encoded: list[tuple[RewardInput, RewardInput]],
    index: Sequence[int],
    clusters: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward over [chosen_1..m, rejected_1..m] -> (chosen rewards [K, m], rejected rewards
    [K, m]), K the model's outputs (1, or an ensemble's heads). ``clusters``: every pair's cluster
    id (indexed like ``encoded``), for cluster conditioning."""
    pair_clusters = None if clusters is None else [clusters[i] for i in index] * 2
    rewards = scorer.score_members(
        [encoded[i][0] for i in index] + [encoded[i][1] for i in index], pair_clusters
    )
    return rewards[:, : len(index)], rewards[:, len(index) :]


def _pair_rewards(
    scorer: RewardScorer,
    encoded: list[tuple[RewardInput, RewardInput]],
    index: Sequence[int],
    clusters: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen rewards [m], rejected rewards [m]) of a one-output reward model."""
    chosen, rejected = _pair_member_rewards(scorer, encoded, index, clusters)
    return chosen[0], rejected[0]


def held_out_rewards(
    scorer: RewardScorer,
    encoded: list[tuple[RewardInput, RewardInput]],
    index: Sequence[int],
    *,
    batch_size: int,
    device: torch.device,
    bf16: bool,
    clusters: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every head's rewards of the pairs in ``index``, in eval mode: (chosen [K, n], rejected
    [K, n]) float32 on the CPU."""
    was_training = scorer.model.training
    scorer.model.eval()
    chosen, rejected = [], []
    with torch.inference_mode(), autocast(device, bf16):
        for group in chunks(list(index), batch_size):
            c, r = _pair_member_rewards(scorer, encoded, group, clusters)
            chosen.append(c.float().cpu())
            rejected.append(r.float().cpu())
    scorer.model.train(was_training)
    return torch.cat(chosen, dim=1), torch.cat(rejected, dim=1)


def _fitted_pairs(
    scorer: RewardScorer,
    pairs: Sequence[Any],
    votes: Sequence[AnnotatorVote],
    on_batch: Callable[[int, int], None] | None = None,
    batch_size: int = 1,
) -> tuple[list[Any], list[AnnotatorVote], list[tuple[RewardInput, RewardInput]]]:
    """The pairs that survive fitting to the reward model (``RewardScorer.encode_pair``), their
    votes renumbered to match, and their encoded (chosen, rejected) inputs. ``on_batch(done,
    total)`` hears the progress in batches of ``batch_size`` pairs (0 of total first)."""
    total = -(-len(pairs) // max(1, batch_size))
    if on_batch is not None:
        on_batch(0, total)
    kept, encoded, renumber = [], [], {}
    for index, pair in enumerate(pairs):
        if on_batch is not None and index and index % batch_size == 0:
            on_batch(index // batch_size, total)
        fitted = scorer.encode_pair(pair.prompt, pair.chosen, pair.rejected)
        if fitted is not None:
            renumber[index] = len(kept)
            kept.append(pair)
            encoded.append(fitted)
    kept_votes = [
        dataclasses.replace(vote, pair=renumber[vote.pair])
        for vote in votes
        if vote.pair in renumber
    ]
    if on_batch is not None and total:
        on_batch(total, total)
    return kept, kept_votes, encoded


def train_reward_model(
    config: RewardModelConfig, callback: TrainingCallback | None = None
) -> TrainResult:
    """Train a Bradley-Terry reward model; resumes from the newest checkpoint when allowed.

    With ``annotator_aware`` or ``cluster_conditioning``, a plain model is trained first
    (``train_plain_baseline``) and its held-out accuracy is reported next to the conditioned one's.
    ``loss`` "plackett_luce" or "aspect_regression": ranked lists or rated responses instead of
    pairs (``reward_rows.train_row_reward_model``).
    """
    if config.loss != "bradley_terry":
        return train_row_reward_model(config, callback)
    if config.ensemble_size > 1 and config.ensemble_mode == "independent":
        return train_independent_ensemble(config, callback, train_member=_train_member)
    needs_baseline = config.annotator_aware or config.cluster_conditioning
    plain_summary = train_plain_baseline(config) if needs_baseline else {}
    return _train_one(config, callback, plain_summary=plain_summary)


def train_plain_baseline(config: RewardModelConfig) -> dict[str, Any]:
    """Train the plain model of ``config`` (neither annotator-aware nor cluster-conditioned) in
    ``output_dir/plain`` and return its summary; a resumed run keeps a baseline that completed."""
    plain = dataclasses.replace(
        config,
        annotator_aware=False,
        cluster_conditioning=False,
        output_dir=str(Path(config.output_dir) / "plain"),
    )
    finished = Path(plain.output_dir) / "summary.json"
    if config.resume and finished.is_file() and '"completed"' in finished.read_text():
        return json.loads(finished.read_text())
    return _train_one(plain, None, plain_summary={}).summary


def _train_member(
    config: RewardModelConfig, callback: TrainingCallback, member: EnsembleMember
) -> TrainResult:
    """One member of an independent ensemble (``reward_ensemble.train_independent_ensemble``)."""
    return _train_one(config, callback, plain_summary={}, member=member)


def _train_one(
    config: RewardModelConfig,
    callback: TrainingCallback | None,
    *,
    plain_summary: dict[str, Any],
    member: EnsembleMember | None = None,
) -> TrainResult:
    """One reward model as configured (one encoder with K heads for a heads ensemble; one member
    of an independent ensemble): set up, step, evaluate on the held-out pairs, save."""
    run = start_run(config, callback)
    state = setup_reward_model(run, config, member=member)
    end = run_pair_steps(state, "rm", reward_model_step)
    evaluation: dict[str, float] = {}
    if state.eval_index:
        chosen, rejected = held_out_rewards(
            state.scorer,
            state.encoded,
            state.eval_index,
            batch_size=state.micro_batch_size,
            device=run.device,
            bf16=config.bf16,
            clusters=state.cluster_ids,
        )
        evaluation = ensemble_eval_metrics(chosen, rejected)
        if member is not None and run.ranks.main:
            (run.output_dir / MEMBER_EVAL_FILE).write_text(
                json.dumps({"chosen": chosen[0].tolist(), "rejected": rejected[0].tolist()})
            )
    if evaluation:
        run.callback.on_log(step=end.step, metrics=evaluation)
    files: dict[str, Any] = {"reward_stats.json": evaluation} if evaluation else {}
    if state.conditioning is not None:
        files[CONDITIONING_FILE] = state.conditioning.payload()
    if config.ensemble_size > 1 and member is None:
        files[ENSEMBLE_FILE] = EnsembleManifest("heads", config.ensemble_size).payload()
    return finish_run(
        run,
        status=end.status,
        step=end.step,
        model=state.model,
        tokenizer=state.tokenizer,
        summary=reward_model_summary(state, end, evaluation, plain_summary),
        extra_files=files or None,
    )


@dataclass
class RewardModelState(PairRecipeState):
    """What a reward-model run holds between steps, beside ``PairRecipeState``'s: the scorer of
    ``model``, the fitted pairs (``encoded`` [chosen, rejected] inputs, indexed like ``pairs``), the
    split, and the optional annotator head and cluster conditioning."""

    config: RewardModelConfig
    scorer: RewardScorer
    pairs: list[Any]
    raw_votes: list[AnnotatorVote]
    encoded: list[tuple[RewardInput, RewardInput]]
    train_index: list[int]
    eval_index: list[int]
    head: AnnotatorBiasHead | None
    votes: VoteTable | None
    conditioning: ClusterConditioning | None
    cluster_ids: list[int] | None
    bootstrap: torch.Tensor | None = None  # heads ensemble: [K, pairs] resample counts (0: eval)

    @property
    def extra_modules(self) -> dict[str, nn.Module] | None:
        """The modules trained beside the model (saved in checkpoints), or None."""
        extra = {"annotator_head": self.head, "cluster_conditioning": self.conditioning}
        return {name: module for name, module in extra.items() if module is not None} or None


def _cluster_conditioning(
    config: RewardModelConfig, pairs: Sequence[Any], scorer: RewardScorer, device: torch.device
) -> tuple[ClusterConditioning | None, list[int] | None]:
    """With ``cluster_conditioning``: the conditioning attached to the scorer's model, and each
    pair's cluster id; (None, None) without."""
    if not config.cluster_conditioning:
        return None, None
    names = sorted({p.cluster for p in pairs if p.cluster is not None})
    if not names:
        raise ValueError(f"{config.data}: cluster_conditioning needs rows with a 'cluster'")
    hidden = scorer.model.get_input_embeddings().embedding_dim
    conditioning = ClusterConditioning(names, hidden).to(device)
    conditioning.attach(scorer.model)
    scorer.conditioning = conditioning
    return conditioning, conditioning.ids([p.cluster for p in pairs])


def setup_reward_model(
    run: Run, config: RewardModelConfig, *, member: EnsembleMember | None = None
) -> RewardModelState:
    """Model, fitted pairs and their split, the optional annotator head and cluster
    conditioning, optimiser (the extra modules at ``annotator_head_learning_rate``) and schedule,
    restored to where the run stopped. An ensemble's bootstrap resamples: a heads ensemble keeps
    the counts [K, pairs] to weight each head's loss; an independent ``member`` trains on its
    row's pairs, each repeated as often as it was drawn."""
    judgements = config.judgements or (
        judgements_file_for(config.data) if config.annotator_aware else None
    )
    pairs, raw_votes = load_judged_pairs(config.data, judgements)
    run.callback.on_phase(phase=LOADING_PHASE, done=0, total=0)
    tokenizer, model, scorer = load_reward_model(run, config)
    pairs, raw_votes, encoded = _fitted_pairs(
        scorer,
        pairs,
        raw_votes,
        on_batch=lambda done, total: run.callback.on_phase(
            phase=TOKENISING_PHASE, done=done, total=total
        ),
        batch_size=config.batch_size,
    )
    if not pairs:
        raise ValueError(f"{config.data}: every pair was dropped when fitted to the model")
    split_seed = config.seed if member is None else member.split_seed
    train_index, eval_index = split_eval(len(pairs), config.eval_fraction, split_seed)
    if not train_index:
        raise ValueError(f"{config.data}: no pairs left to train on after the eval split")
    train_index, bootstrap = _bootstrap_resample(
        train_index, len(pairs), config, member=member, split_seed=split_seed
    )
    votes = VoteTable.build(raw_votes, len(pairs)) if config.annotator_aware else None
    head = AnnotatorBiasHead(votes.annotators).to(run.device) if votes is not None else None
    conditioning, cluster_ids = _cluster_conditioning(config, pairs, scorer, run.device)
    extra_params = [p for m in (head, conditioning) if m is not None for p in m.parameters()]
    sampler = EpochSampler(len(train_index), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    optimizer = build_optimizer(
        model.parameters(),
        config,
        run.device,
        extra_groups=None
        if not extra_params
        else [{"params": extra_params, "lr": config.annotator_head_learning_rate}],
    )
    state = RewardModelState(
        run=run,
        config=config,
        tokenizer=tokenizer,
        model=model,
        scorer=scorer,
        pairs=pairs,
        raw_votes=raw_votes,
        encoded=encoded,
        train_index=train_index,
        eval_index=eval_index,
        head=head,
        votes=votes,
        conditioning=conditioning,
        cluster_ids=cluster_ids,
        bootstrap=bootstrap,
        sampler=sampler,
        total_steps=total_steps,
        start_step=0,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, config, total_steps),
    )
    state.start_step, _ = run.restore_training_state(
        run.resume_from,
        optimizer=optimizer,
        scheduler=state.scheduler,
        extra_modules=state.extra_modules,
    )
    return state


def _bootstrap_resample(
    train_index: list[int],
    n_pairs: int,
    config: RewardModelConfig,
    *,
    member: EnsembleMember | None,
    split_seed: int,
) -> tuple[list[int], torch.Tensor | None]:
    """An ensemble's bootstrap resamples of the training pairs: an independent ``member`` trains
    on its row's pairs, each repeated as often as it was drawn (no weights); a heads ensemble
    (``ensemble_size`` K > 1) keeps every pair once and weights head k's loss by the counts
    [K, n_pairs] (0 off the training split); a single model trains on the split as it is."""
    if member is not None:
        row = bootstrap_counts(n_items=len(train_index), members=member.size, seed=split_seed)
        drawn = [
            pair
            for pair, n in zip(train_index, row[member.index].tolist(), strict=True)
            for _ in range(n)
        ]
        return drawn, None
    if config.ensemble_size > 1:
        counts = bootstrap_counts(
            n_items=len(train_index), members=config.ensemble_size, seed=config.seed
        )
        bootstrap = torch.zeros(config.ensemble_size, n_pairs)
        bootstrap[:, train_index] = counts.float()
        return train_index, bootstrap
    return train_index, None


def reward_model_step(state: RewardModelState, at: Position, throughput: Throughput) -> StepOutcome:
    """One optimiser step on the training pairs of the sampler's batch at ``at``: this rank's
    micro-batches forward and backward (``_micro_batch_loss``), sums over every rank, one step."""
    config, run = state.config, state.run
    index = [state.train_index[i] for i in state.sampler.batch(at.epoch, at.batch_index)]
    sums = {"loss": 0.0, "accuracy": 0.0, "rewards/chosen": 0.0, "rewards/rejected": 0.0}
    tokens = 0.0
    with throughput.timing():
        step_votes = state.votes.count(index) if state.votes is not None else 0
        for group in chunks(run.ranks.shard(index), state.micro_batch_size):
            with autocast(run.device, config.bf16):
                members_chosen, members_rejected = _pair_member_rewards(
                    state.scorer, state.encoded, group, state.cluster_ids
                )
            if state.bootstrap is not None:  # a heads ensemble: each head on its resample
                objective, loss_sum = _ensemble_micro_batch_loss(
                    state, group, members_chosen, members_rejected, step_pairs=len(index)
                )
                chosen, rejected = members_chosen.mean(dim=0), members_rejected.mean(dim=0)
            else:
                chosen, rejected = members_chosen[0], members_rejected[0]
                objective, loss_sum = _micro_batch_loss(
                    state, group, chosen, rejected, step_pairs=len(index), step_votes=step_votes
                )
            objective.backward()
            sums["loss"] += loss_sum
            sums["accuracy"] += float((chosen > rejected).float().sum())
            sums["rewards/chosen"] += float(chosen.detach().sum())
            sums["rewards/rejected"] += float(rejected.detach().sum())
            tokens += sum(
                len(state.encoded[i][0].input_ids) + len(state.encoded[i][1].input_ids)
                for i in group
            )
        params = [*state.model.parameters()]
        params += [
            p for module in (state.extra_modules or {}).values() for p in module.parameters()
        ]
        return reduce_and_step(
            state, sums, tokens=tokens, items=len(index), throughput=throughput, params=params
        )


def _ensemble_micro_batch_loss(
    state: RewardModelState,
    group: Sequence[int],
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    *,
    step_pairs: int,
) -> tuple[torch.Tensor, float]:
    """A heads ensemble's micro-batch share of the step's objective and its loss summed over its
    pairs: each head's Bradley-Terry loss weighted by its bootstrap counts, averaged over heads
    (``bootstrap_weighted_bt``). chosen, rejected: member rewards [K, m] of ``group``'s pairs."""
    assert state.bootstrap is not None
    weights = state.bootstrap[:, list(group)].to(chosen.device)
    loss = bootstrap_weighted_bt(chosen, rejected, weights, normaliser=float(step_pairs))
    return loss, float(loss.detach()) * step_pairs


def _micro_batch_loss(
    state: RewardModelState,
    group: Sequence[int],
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    *,
    step_pairs: int,
    step_votes: int,
) -> tuple[torch.Tensor, float]:
    """The micro-batch's share of the step's objective (to backward) and its loss summed over its
    pairs (for the logged mean). chosen, rejected: rewards [m] of ``group``'s pairs.

    Annotator-aware: every vote's cross-entropy through the annotator head over the step's votes,
    plus the centring term; plain: the Bradley-Terry loss (with margins when ``use_margin``)."""
    config, device = state.config, chosen.device
    if state.head is not None and state.votes is not None:
        vote_loss, _ = annotator_loss(state.head, state.votes, group, chosen, rejected)
        centering = ((chosen + rejected) ** 2).sum() / step_pairs
        objective = vote_loss / step_votes + config.center_rewards_coef * centering
        return objective, float(vote_loss.detach()) * step_pairs / step_votes
    margins = torch.tensor([state.pairs[i].margin for i in group]) if config.use_margin else None
    loss = bradley_terry_loss(
        chosen,
        rejected,
        margin=None if margins is None else margins.to(device),
        center_rewards_coef=config.center_rewards_coef,
    )
    return loss * len(group) / step_pairs, float(loss.detach()) * len(group)


def reward_model_summary(
    state: RewardModelState,
    end: LoopEnd,
    evaluation: dict[str, float],
    plain_summary: dict[str, Any],
) -> dict[str, Any]:
    """The run's summary: data, rates, held-out numbers, and what the head, the conditioning and
    the plain baseline report."""
    throughput = end.throughput
    summary = {
        "kind": "rm",
        "pairs": len(state.pairs),
        "train_pairs": len(state.train_index),
        "eval_pairs": len(state.eval_index),
        "pairs_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": throughput.seconds,
        "pairs_per_second": throughput.per_second(throughput.items),
        "tokens_per_second": throughput.per_second(throughput.tokens),
        **state.scorer.fit.summary(),
        "packed": state.scorer.packed or state.scorer.encoder_packed,
        "bf16": state.config.bf16,
        "peak_memory_bytes": peak_memory_bytes(state.run.device),
        **evaluation,
    }
    if state.config.ensemble_size > 1:
        summary["ensemble_size"] = state.config.ensemble_size
        summary["ensemble_mode"] = state.config.ensemble_mode
    if state.head is not None:
        summary["annotators"] = state.head.report()
        summary["annotator_votes"] = len(state.raw_votes)
    if state.conditioning is not None:
        summary["clusters"] = state.conditioning.report()
    if plain_summary:
        summary["plain/eval/accuracy"] = plain_summary.get("eval/accuracy")
        summary["plain/eval/reward_std"] = plain_summary.get("eval/reward_std")
    return summary

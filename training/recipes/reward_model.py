"""Reward model recipe: a one-output sequence-classification head on any registered encoder or decoder,
trained with the Bradley-Terry loss on preference pairs.

Decoders (SmolLM2) read the reward at the last token of prompt + response rendered with the chat
template, in packed batches when the architecture allows; encoders (MiniLM) read it from the pooled
first token of the pair ``[CLS] prompt [SEP] response [SEP]``, unpadded for BERT-family models (linear
layers on the real tokens only). The trained model is a plain ``AutoModelForSequenceClassification``
folder; ``RewardScorer`` scores new responses the same way.

PIPELINE.md's annotator-aware reward model, as two options: ``annotator_aware`` trains on every
annotator's own vote instead of the consensus, through a per-annotator reliability scale and side bias
(``AnnotatorBiasHead``) that is dropped afterwards; ``cluster_conditioning`` adds a learned embedding
of the prompt's cluster to every input token (``ClusterConditioning``), saved beside the model as
``cluster_conditioning.json``. With either, a plain model is trained first and its held-out accuracy
is reported next to the conditioned one's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from training.algorithms import bradley_terry_loss
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import RewardModelConfig
from training.recipes.data import (
    AnnotatorVote,
    ChatEncoder,
    EpochSampler,
    FitLog,
    Messages,
    chunks,
    fit_prompt,
    judgements_file_for,
    load_judged_pairs,
    split_eval,
    token_limit,
)
from training.recipes.distributed import all_reduce_sum
from training.recipes.loop import (
    LoopEnd,
    Position,
    Run,
    StepOutcome,
    finish_run,
    optimizer_step,
    run_steps,
    start_run,
)
from training.recipes.models import (
    disable_dropout,
    enable_activation_checkpointing,
    load_tokenizer,
)
from training.recipes.packing import (
    VARLEN_ATTENTION,
    TokenizedSequence,
    build_batch,
    last_hidden_states,
    packed_attention_for,
    packed_encoder_logits,
    supports_encoder_packing,
    supports_packing,
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


@dataclass(frozen=True)
class RewardInput:
    """One (prompt, response) as the reward model reads it."""

    input_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...] | None = None


def load_sequence_classifier(
    path: str | Path, *, device: torch.device, tokenizer: Any, packing: bool = True
) -> Any:
    """A 1-label AutoModelForSequenceClassification in float32 (a new head when ``path`` holds a
    base model), with the tokenizer's pad id so padded batches find each row's last token."""
    from transformers import AutoModelForSequenceClassification

    kwargs: dict[str, Any] = {"num_labels": 1, "dtype": torch.float32}
    model = None
    if packing:
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                str(path), attn_implementation=packed_attention_for("cpu"), **kwargs
            )
        except (ValueError, ImportError):
            model = None
    if model is None:
        model = AutoModelForSequenceClassification.from_pretrained(str(path), **kwargs)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.use_cache = False
    return model.to(device)


CONDITIONING_FILE = "cluster_conditioning.json"


class ClusterConditioning(nn.Module):
    """Domain conditioning (PIPELINE.md's third layer): a learned vector per prompt cluster, added to
    the input embedding of every token of a sequence whose prompt is in that cluster.

    Added to the input, not to the pooled output: an offset at the output would be the same for a
    pair's chosen and rejected responses (same prompt, same cluster) and cancel in the Bradley-Terry
    difference. Row 0 is "no cluster" and stays zero; the others start at zero, so training starts
    from the base model. Shapes: ``weight`` [C + 1, H].
    """

    def __init__(self, clusters: Sequence[str], hidden_size: int) -> None:
        super().__init__()
        self.clusters = list(clusters)
        self.index = {name: i + 1 for i, name in enumerate(self.clusters)}
        self.weight = nn.Parameter(torch.zeros(len(self.clusters) + 1, hidden_size))
        self._tokens: torch.Tensor | None = None

    def ids(self, clusters: Sequence[str | None]) -> list[int]:
        return [self.index.get(c, 0) if c is not None else 0 for c in clusters]

    def attach(self, model: Any) -> None:
        """Add the current token clusters to ``model``'s input embeddings from now on."""
        model.get_input_embeddings().register_forward_hook(self._add)

    def _add(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        if self._tokens is None:
            return output
        known = (self._tokens > 0).unsqueeze(-1)  # row 0 ("no cluster") adds exactly nothing
        added = torch.where(known, self.weight[self._tokens], 0.0)
        return output + added.to(output.dtype)

    def condition(self, tokens: torch.Tensor | None) -> None:
        """Cluster id per input token (the shape of the next forward's input ids), or None."""
        self._tokens = tokens

    def report(self) -> dict[str, float]:
        """Norm of each cluster's learned vector (how far the reward adapted to that domain)."""
        norms = self.weight.detach()[1:].norm(dim=-1).tolist()
        return {name: round(norm, 4) for name, norm in zip(self.clusters, norms, strict=True)}

    def payload(self) -> dict[str, Any]:
        return {"clusters": self.clusters, "weight": self.weight.detach()[1:].tolist()}

    @classmethod
    def load(cls, folder: str | Path, hidden_size: int) -> ClusterConditioning | None:
        """The conditioning saved beside a trained reward model (``CONDITIONING_FILE``), or None
        when the model was trained without it."""
        file = Path(folder) / CONDITIONING_FILE
        if not file.is_file():
            return None
        payload = json.loads(file.read_text())
        module = cls(payload["clusters"], hidden_size)
        weight = torch.tensor(payload["weight"], dtype=torch.float32)
        if weight.shape != (len(module.clusters), hidden_size):
            raise ValueError(
                f"{file}: weight is {list(weight.shape)}, expected "
                f"[{len(module.clusters)}, {hidden_size}] (clusters x the model's hidden size)"
            )
        with torch.no_grad():
            module.weight[1:] = weight
        return module


class RewardScorer:
    """Encodes (prompt, response) pairs and returns scalar rewards [S] float32 for a reward model.

    Inputs are fitted to ``max_length`` and to the model's own limits (its position table, its
    tokenizer's ``model_max_length``): the response stays whole when the prompt keeps
    ``prompt_budget`` tokens beside it, and the prompt keeps the end of the conversation (see
    ``ChatEncoder``); what was cut is noted in ``fit``.

    With a ``ClusterConditioning`` (``condition_on``), each prompt's cluster comes from
    ``prompt_clusters``; prompts it does not know score as "no cluster"."""

    conditioning: ClusterConditioning | None = None

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_length: int,
        prompt_budget: int,
        fit: FitLog | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = token_limit(
            max_length=max_length, model_config=model.config, tokenizer=tokenizer
        )
        self.prompt_budget = min(prompt_budget, self.max_length // 2)
        self.fit = fit or FitLog("samples")
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        self.chat_encoder = ChatEncoder(
            tokenizer, max_length=self.max_length, prompt_budget=self.prompt_budget, fit=self.fit
        )
        head = getattr(model, "score", None)
        self.packed = (
            self.chat
            and supports_packing(model)
            and isinstance(head, torch.nn.Linear)
            and model.config._attn_implementation in (VARLEN_ATTENTION, "flash_attention_2")
        )
        self.encoder_packed = supports_encoder_packing(model)
        self.prompt_clusters: dict[Messages, str] = {}

    def condition_on(
        self, conditioning: ClusterConditioning, prompt_clusters: dict[Messages, str]
    ) -> None:
        """Score with ``conditioning`` from now on, each prompt in its ``prompt_clusters`` entry."""
        conditioning.attach(self.model)
        self.conditioning = conditioning
        self.prompt_clusters = dict(prompt_clusters)

    def clusters_for(self, prompts: Sequence[Messages]) -> list[int] | None:
        """Cluster ids of ``prompts`` for ``score`` (0: none), or None without conditioning."""
        if self.conditioning is None:
            return None
        return self.conditioning.ids([self.prompt_clusters.get(p) for p in prompts])

    def conditioned_clusters(self) -> int:
        """How many prompt clusters the reward model tells apart (0: not conditioned)."""
        return 0 if self.conditioning is None else len(self.conditioning.clusters)

    def share_clusters(self, variants: Sequence[Messages], originals: Sequence[Messages]) -> None:
        """Each variant of a prompt (an instruction appended, say) is in its original's cluster."""
        for variant, original in zip(variants, originals, strict=True):
            if variant != original and original in self.prompt_clusters:
                self.prompt_clusters[variant] = self.prompt_clusters[original]

    def encode(self, prompt: Messages, response: str) -> RewardInput:
        return self._encode(prompt, [response], (prompt, response))[0]

    def encode_pair(
        self, prompt: Messages, chosen: str, rejected: str
    ) -> tuple[RewardInput, RewardInput] | None:
        """Both answers after one fitted prompt, or None (noted as dropped) when cutting them to
        fit left the same tokens."""
        key = (prompt, chosen, rejected)
        before = self.fit.truncated
        first, second = self._encode(prompt, [chosen, rejected], key)
        if first == second and self.fit.truncated > before:
            self.fit.note_dropped(key, "both answers the same once fitted")
            return None
        return first, second

    def _encode(self, prompt: Messages, responses: Sequence[str], key: Any) -> list[RewardInput]:
        if self.chat:
            return [
                RewardInput(seq.input_ids) for seq in self.chat_encoder._fit(prompt, responses, key)
            ]
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:  # no fast tokenizer to fit with: the tokenizer's own truncation
            return [self._encode_plain(prompt, response) for response in responses]
        return self._encode_text_pairs(backend, prompt, responses, key)

    def _encode_plain(self, prompt: Messages, response: str) -> RewardInput:
        text = "\n\n".join(content for _, content in prompt)
        encoded = self.tokenizer(text, response, truncation=True, max_length=self.max_length)
        types = encoded.get("token_type_ids")
        return RewardInput(tuple(encoded["input_ids"]), None if types is None else tuple(types))

    def _encode_text_pairs(
        self, backend: Any, prompt: Messages, responses: Sequence[str], key: Any
    ) -> list[RewardInput]:
        """Encoders read ``[CLS] prompt [SEP] response [SEP]``: the prompt's text fitted in whole
        turns, then both parts cut in tokens where needed, then the tokenizer's special tokens."""
        room_total = self.max_length - self.tokenizer.num_special_tokens_to_add(pair=True)

        def text(messages: Messages) -> str:
            return "\n\n".join(content for _, content in messages)

        answers = [backend.encode(r, add_special_tokens=False) for r in responses]
        longest = max(len(a.ids) for a in answers)
        room = max(room_total - longest, self.prompt_budget)
        full_prompt = len(backend.encode(text(prompt), add_special_tokens=False).ids)
        kept, cut = fit_prompt(
            prompt, room, lambda m: len(backend.encode(text(m), add_special_tokens=False).ids)
        )
        question = backend.encode(text(kept), add_special_tokens=False)
        if len(question.ids) > room:
            question.truncate(room, direction="left")
        left = room_total - len(question.ids)
        if cut or longest > left:
            self.fit.note_truncated(
                key,
                f"prompt {' '.join(prompt[-1][1].split())[:60]!r}: {full_prompt} -> "
                f"{len(question.ids)} tokens; responses {[len(a.ids) for a in answers]} -> "
                f"{[min(len(a.ids), left) for a in answers]} tokens",
            )
        typed = "token_type_ids" in self.tokenizer.model_input_names
        inputs = []
        for answer in answers:
            if len(answer.ids) > left:
                answer.truncate(left)
            joined = backend.post_process(question, answer, add_special_tokens=True)
            inputs.append(RewardInput(tuple(joined.ids), tuple(joined.type_ids) if typed else None))
        return inputs

    def score(
        self, inputs: Sequence[RewardInput], clusters: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Rewards [S] float32 (with gradients when the model is training and grad is enabled).

        ``clusters``: each input's cluster id for the attached ``ClusterConditioning`` (0: none)."""
        if self.conditioning is None or clusters is None:
            return self._score(inputs)
        ids = torch.tensor(list(clusters))
        lengths = torch.tensor([len(x.input_ids) for x in inputs])
        device = next(self.model.parameters()).device
        if self.packed or self.encoder_packed:  # one row, sequences one after another
            tokens = ids.repeat_interleave(lengths)[None]
        else:
            tokens = ids[:, None].expand(len(inputs), int(lengths.max()))
        self.conditioning.condition(tokens.to(device))
        try:
            return self._score(inputs)
        finally:
            self.conditioning.condition(None)

    def _score(self, inputs: Sequence[RewardInput]) -> torch.Tensor:
        device = next(self.model.parameters()).device
        if self.packed:
            sequences = [TokenizedSequence(x.input_ids, len(x.input_ids)) for x in inputs]
            batch = build_batch(
                sequences, packed=True, pad_token_id=self.tokenizer.pad_token_id, device=device
            )
            hidden = last_hidden_states(self.model, batch).index_select(0, batch.last_index)
            return self.model.score(hidden).squeeze(-1).float()
        if self.encoder_packed:
            logits = packed_encoder_logits(
                self.model, [x.input_ids for x in inputs], [x.token_type_ids for x in inputs]
            )
            return logits[:, 0].float()
        longest = max(len(x.input_ids) for x in inputs)
        ids = torch.full((len(inputs), longest), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        types = torch.zeros_like(ids)
        for row, x in enumerate(inputs):
            ids[row, : len(x.input_ids)] = torch.tensor(x.input_ids)
            mask[row, : len(x.input_ids)] = 1
            if x.token_type_ids is not None:
                types[row, : len(x.token_type_ids)] = torch.tensor(x.token_type_ids)
        kwargs = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
        if any(x.token_type_ids is not None for x in inputs):
            kwargs["token_type_ids"] = types.to(device)
        return self.model(**kwargs).logits[:, 0].float()


def _pair_rewards(
    scorer: RewardScorer,
    encoded: list[tuple[RewardInput, RewardInput]],
    index: Sequence[int],
    clusters: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward over [chosen_1..m, rejected_1..m] -> (chosen rewards [m], rejected rewards [m]).
    ``clusters``: every pair's cluster id (indexed like ``encoded``), for cluster conditioning."""
    pair_clusters = None if clusters is None else [clusters[i] for i in index] * 2
    rewards = scorer.score(
        [encoded[i][0] for i in index] + [encoded[i][1] for i in index], pair_clusters
    )
    return rewards[: len(index)], rewards[len(index) :]


def evaluate_reward_model(
    scorer: RewardScorer,
    encoded: list[tuple[RewardInput, RewardInput]],
    index: Sequence[int],
    *,
    batch_size: int,
    device: torch.device,
    bf16: bool,
    clusters: Sequence[int] | None = None,
) -> dict[str, float]:
    """Held-out accuracy (chosen scored above rejected), BT loss, and the mean and standard deviation
    of all rewards (a std under 0.05 is PIPELINE.md's reward-collapse alarm)."""
    if not index:
        return {}
    was_training = scorer.model.training
    scorer.model.eval()
    chosen, rejected = [], []
    with torch.inference_mode(), autocast(device, bf16):
        for group in chunks(list(index), batch_size):
            c, r = _pair_rewards(scorer, encoded, group, clusters)
            chosen.append(c.cpu())
            rejected.append(r.cpu())
    scorer.model.train(was_training)
    c, r = torch.cat(chosen), torch.cat(rejected)
    everything = torch.cat([c, r])
    return {
        "eval/accuracy": float((c > r).float().mean()),
        "eval/loss": float(bradley_terry_loss(c, r)),
        "eval/reward_mean": float(everything.mean()),
        "eval/reward_std": float(everything.std()) if everything.numel() > 1 else 0.0,
        "eval/pairs": float(len(index)),
    }


CONSENSUS_VOTER = "(consensus)"


class AnnotatorBiasHead(nn.Module):
    """Per-annotator calibration of the base reward (PIPELINE.md's annotator-aware reward model).

    P(annotator k prefers the chosen response) = sigmoid(s_k (r_chosen - r_rejected) + b_k side),
    side = +1 when the chosen response was shown on the left, -1 on the right, 0 unknown. s_k = exp of
    a learned log-scale (reliability: a noisy annotator's votes move the base reward less) and b_k is
    the annotator's pull towards the left side. An additive per-annotator offset would cancel in the
    difference, so these two are the biases a pairwise judgement can reveal. Trained jointly with the
    reward model and dropped at inference: the saved model is the base reward model alone.
    """

    def __init__(self, annotators: Sequence[str]) -> None:
        super().__init__()
        self.annotators = list(annotators)
        self.log_scale = nn.Parameter(torch.zeros(len(self.annotators)))
        self.side_bias = nn.Parameter(torch.zeros(len(self.annotators)))

    def forward(
        self, reward_gap: torch.Tensor, annotator: torch.Tensor, side: torch.Tensor
    ) -> torch.Tensor:
        """reward_gap, side: [V] float, annotator: [V] long -> logits [V] of preferring chosen."""
        return self.log_scale[annotator].exp() * reward_gap + self.side_bias[annotator] * side

    def report(self) -> dict[str, dict[str, float]]:
        scale, bias = self.log_scale.detach().exp().tolist(), self.side_bias.detach().tolist()
        return {
            name: {"scale": round(scale[i], 4), "left_bias": round(bias[i], 4)}
            for i, name in enumerate(self.annotators)
        }


@dataclass
class VoteTable:
    """Votes grouped by pair: for each pair, (annotator ids, side, label) tensors."""

    by_pair: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    annotators: list[str]

    @classmethod
    def build(cls, votes: Sequence[AnnotatorVote], n_pairs: int) -> VoteTable:
        annotators = sorted({v.annotator for v in votes} | {CONSENSUS_VOTER})
        ids = {name: i for i, name in enumerate(annotators)}
        rows: dict[int, list[tuple[int, float, float]]] = {}
        for vote in votes:
            side = (
                0.0 if vote.chosen_shown_left is None else (1.0 if vote.chosen_shown_left else -1.0)
            )
            rows.setdefault(vote.pair, []).append(
                (ids[vote.annotator], side, float(vote.prefers_chosen))
            )
        for pair in range(n_pairs):  # a pair with no recorded votes counts as one consensus vote
            rows.setdefault(pair, [(ids[CONSENSUS_VOTER], 0.0, 1.0)])
        table = {
            pair: (
                torch.tensor([r[0] for r in entries]),
                torch.tensor([r[1] for r in entries]),
                torch.tensor([r[2] for r in entries]),
            )
            for pair, entries in rows.items()
        }
        return cls(table, annotators)

    def count(self, pairs: Sequence[int]) -> int:
        return sum(len(self.by_pair[p][0]) for p in pairs)


def _annotator_loss(
    head: AnnotatorBiasHead,
    votes: VoteTable,
    group: Sequence[int],
    chosen: torch.Tensor,
    rejected: torch.Tensor,
) -> tuple[torch.Tensor, int]:
    """Summed binary cross-entropy of every vote on ``group``'s pairs, and the number of votes."""
    device = chosen.device
    gap = chosen - rejected
    position = torch.cat(
        [torch.full((len(votes.by_pair[p][0]),), i) for i, p in enumerate(group)]
    ).to(device)
    annotator, side, label = (
        torch.cat([votes.by_pair[p][k] for p in group]).to(device) for k in range(3)
    )
    logits = head(gap.index_select(0, position), annotator, side)
    loss = F.binary_cross_entropy_with_logits(logits, label, reduction="sum")
    return loss, int(label.numel())


def _fitted_pairs(
    scorer: RewardScorer, pairs: Sequence[Any], votes: Sequence[AnnotatorVote]
) -> tuple[list[Any], list[AnnotatorVote], list[tuple[RewardInput, RewardInput]]]:
    """The pairs that survive fitting to the reward model (``RewardScorer.encode_pair``), their
    votes renumbered to match, and their encoded (chosen, rejected) inputs."""
    kept, encoded, renumber = [], [], {}
    for index, pair in enumerate(pairs):
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
    return kept, kept_votes, encoded


def train_reward_model(
    config: RewardModelConfig, callback: TrainingCallback | None = None
) -> TrainResult:
    """Train a Bradley-Terry reward model; resumes from the newest checkpoint when allowed.

    With ``annotator_aware`` or ``cluster_conditioning``, a plain model is trained first
    (``train_plain_baseline``) and its held-out accuracy is reported next to the conditioned one's.
    """
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


def _train_one(
    config: RewardModelConfig, callback: TrainingCallback | None, *, plain_summary: dict[str, Any]
) -> TrainResult:
    """One reward model as configured: set up, step, evaluate on the held-out pairs, save."""
    run = start_run(config, callback)
    state = setup_reward_model(run, config)
    end = run_steps(
        run,
        state.sampler,
        start_step=state.start_step,
        total_steps=state.total_steps,
        rate_name="pairs",
        train_step=lambda at, throughput: reward_model_step(state, at, throughput),
        save_checkpoint=lambda at: run.save_checkpoint(
            step=at.step,
            model=state.model,
            tokenizer=state.tokenizer,
            optimizer=state.optimizer,
            scheduler=state.scheduler,
            trainer_state=at.trainer_state("rm"),
            extra_modules=state.extra_modules,
        ),
    )
    evaluation = evaluate_reward_model(
        state.scorer,
        state.encoded,
        state.eval_index,
        batch_size=state.micro_batch_size,
        device=run.device,
        bf16=config.bf16,
        clusters=state.cluster_ids,
    )
    if evaluation:
        run.callback.on_log(step=end.step, metrics=evaluation)
    files: dict[str, Any] = {"reward_stats.json": evaluation} if evaluation else {}
    if state.conditioning is not None:
        files[CONDITIONING_FILE] = state.conditioning.payload()
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
class RewardModelState:
    """What a reward-model run holds between steps: the model behind ``scorer``, the fitted pairs
    (``encoded`` [chosen, rejected] inputs, indexed like ``pairs``), the split, the optional
    annotator head and cluster conditioning, the optimiser and where the run starts."""

    run: Run
    config: RewardModelConfig
    tokenizer: Any
    model: Any
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
    sampler: EpochSampler
    total_steps: int
    start_step: int
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler

    @property
    def micro_batch_size(self) -> int:
        return self.config.micro_batch_size or self.config.batch_size

    @property
    def extra_modules(self) -> dict[str, nn.Module] | None:
        """The modules trained beside the model (saved in checkpoints), or None."""
        extra = {"annotator_head": self.head, "cluster_conditioning": self.conditioning}
        return {name: module for name, module in extra.items() if module is not None} or None


def load_reward_model(run: Run, config: RewardModelConfig) -> tuple[Any, Any, RewardScorer]:
    """Tokenizer, sequence classifier (from the checkpoint when resuming) in training mode, and
    the scorer that fits and scores pairs for it."""
    tokenizer = load_tokenizer(config.model)
    model = load_sequence_classifier(
        run.resume_from or config.model,
        device=run.device,
        tokenizer=tokenizer,
        packing=config.packing,  # decoders with a chat template, and BERT-family encoders
    )
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


def setup_reward_model(run: Run, config: RewardModelConfig) -> RewardModelState:
    """Model, fitted pairs and their split, the optional annotator head and cluster
    conditioning, optimiser (the extra modules at ``annotator_head_learning_rate``) and schedule,
    restored to where the run stopped."""
    judgements = config.judgements or (
        judgements_file_for(config.data) if config.annotator_aware else None
    )
    pairs, raw_votes = load_judged_pairs(config.data, judgements)
    tokenizer, model, scorer = load_reward_model(run, config)
    pairs, raw_votes, encoded = _fitted_pairs(scorer, pairs, raw_votes)
    if not pairs:
        raise ValueError(f"{config.data}: every pair was dropped when fitted to the model")
    train_index, eval_index = split_eval(len(pairs), config.eval_fraction, config.seed)
    if not train_index:
        raise ValueError(f"{config.data}: no pairs left to train on after the eval split")
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
        sampler=sampler,
        total_steps=total_steps,
        start_step=0,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, config, total_steps),
    )
    if run.resume_from is not None:
        restored, _ = run.checkpoints.restore(
            run.resume_from,
            optimizer=optimizer,
            scheduler=state.scheduler,
            extra_modules=state.extra_modules,
        )
        state.start_step = restored.step
    return state


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
                chosen, rejected = _pair_rewards(
                    state.scorer, state.encoded, group, state.cluster_ids
                )
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
        sums = all_reduce_sum({**sums, "tokens": tokens}, run.ranks, run.device)
        throughput.tokens += int(sums.pop("tokens"))
        params = [*state.model.parameters()]
        params += [
            p for module in (state.extra_modules or {}).values() for p in module.parameters()
        ]
        grad_norm = optimizer_step(
            params, state.optimizer, state.scheduler, config.max_grad_norm, run.ranks
        )
    throughput.items += len(index)
    metrics = {k: v / len(index) for k, v in sums.items()}
    metrics.update(grad_norm=grad_norm, learning_rate=state.scheduler.get_last_lr()[0])
    return StepOutcome(metrics)


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
        vote_loss, _ = _annotator_loss(state.head, state.votes, group, chosen, rejected)
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
    if state.head is not None:
        summary["annotators"] = state.head.report()
        summary["annotator_votes"] = len(state.raw_votes)
    if state.conditioning is not None:
        summary["clusters"] = state.conditioning.report()
    if plain_summary:
        summary["plain/eval/accuracy"] = plain_summary.get("eval/accuracy")
        summary["plain/eval/reward_std"] = plain_summary.get("eval/reward_std")
    return summary

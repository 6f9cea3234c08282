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
from training.recipes.loop import finish_run, mean_metrics, optimizer_step, start_run
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
    memory_fraction,
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

    With ``annotator_aware`` a plain model is trained first (in ``output_dir/plain``) and its held-out
    accuracy is reported next to the annotator-aware model's, trained on the per-annotator votes.
    """
    plain_summary: dict[str, Any] = {}
    if config.annotator_aware or config.cluster_conditioning:
        plain = dataclasses.replace(
            config,
            annotator_aware=False,
            cluster_conditioning=False,
            output_dir=str(Path(config.output_dir) / "plain"),
        )
        finished = Path(plain.output_dir) / "summary.json"
        if config.resume and finished.is_file() and '"completed"' in finished.read_text():
            plain_summary = json.loads(finished.read_text())  # a resumed run keeps its baseline
        else:
            plain_summary = train_reward_model(plain).summary
    run = start_run(config, callback)
    device = run.device
    tokenizer = load_tokenizer(config.model)
    judgements = config.judgements or (
        judgements_file_for(config.data) if config.annotator_aware else None
    )
    pairs, raw_votes = load_judged_pairs(config.data, judgements)
    resume_from = run.resume_from
    packing = config.packing  # decoders with a chat template, and BERT-family encoders
    model = load_sequence_classifier(
        resume_from or config.model, device=device, tokenizer=tokenizer, packing=packing
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
    pairs, raw_votes, encoded = _fitted_pairs(scorer, pairs, raw_votes)
    if not pairs:
        raise ValueError(f"{config.data}: every pair was dropped when fitted to the model")
    train_index, eval_index = split_eval(len(pairs), config.eval_fraction, config.seed)
    if not train_index:
        raise ValueError(f"{config.data}: no pairs left to train on after the eval split")
    margins = torch.tensor([p.margin for p in pairs])
    micro = config.micro_batch_size or config.batch_size

    head = None
    votes = None
    if config.annotator_aware:
        votes = VoteTable.build(raw_votes, len(pairs))
        head = AnnotatorBiasHead(votes.annotators).to(device)
    conditioning = None
    cluster_ids = None
    if config.cluster_conditioning:
        names = sorted({p.cluster for p in pairs if p.cluster is not None})
        if not names:
            raise ValueError(f"{config.data}: cluster_conditioning needs rows with a 'cluster'")
        hidden = model.get_input_embeddings().embedding_dim
        conditioning = ClusterConditioning(names, hidden).to(device)
        conditioning.attach(model)
        scorer.conditioning = conditioning
        cluster_ids = conditioning.ids([p.cluster for p in pairs])
    extra = {"annotator_head": head, "cluster_conditioning": conditioning}
    extra_modules = {name: module for name, module in extra.items() if module is not None} or None
    extra_params = [p for module in (extra_modules or {}).values() for p in module.parameters()]
    params = [*model.parameters(), *extra_params]

    sampler = EpochSampler(len(train_index), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    optimizer = build_optimizer(
        model.parameters(),
        config,
        device,
        extra_groups=None
        if not extra_params
        else [{"params": extra_params, "lr": config.annotator_head_learning_rate}],
    )
    scheduler = build_scheduler(optimizer, config, total_steps)
    start_step = 0
    if resume_from is not None:
        state, _ = run.checkpoints.restore(
            resume_from, optimizer=optimizer, scheduler=scheduler, extra_modules=extra_modules
        )
        start_step = state.step

    run.callback.on_start(total_steps=total_steps, config=config.to_dict())
    throughput = Throughput()
    pending: list[dict[str, float]] = []
    status, step = "completed", start_step
    for step_index, epoch, batch_index in sampler.positions(start_step, total_steps):
        step = step_index + 1
        index = [train_index[i] for i in sampler.batch(epoch, batch_index)]
        sums = {"loss": 0.0, "accuracy": 0.0, "rewards/chosen": 0.0, "rewards/rejected": 0.0}
        tokens = 0.0
        with throughput.timing():
            step_votes = votes.count(index) if votes is not None else 0
            for group in chunks(run.ranks.shard(index), micro):
                with autocast(device, config.bf16):
                    chosen, rejected = _pair_rewards(scorer, encoded, group, cluster_ids)
                if head is not None and votes is not None:
                    vote_loss, _ = _annotator_loss(head, votes, group, chosen, rejected)
                    centering = ((chosen + rejected) ** 2).sum() / len(index)
                    objective = vote_loss / step_votes + config.center_rewards_coef * centering
                    sums["loss"] += float(vote_loss.detach()) * len(index) / step_votes
                else:
                    margin = margins[list(group)].to(device) if config.use_margin else None
                    loss = bradley_terry_loss(
                        chosen,
                        rejected,
                        margin=margin,
                        center_rewards_coef=config.center_rewards_coef,
                    )
                    objective = loss * len(group) / len(index)
                    sums["loss"] += float(loss.detach()) * len(group)
                objective.backward()
                sums["accuracy"] += float((chosen > rejected).float().sum())
                sums["rewards/chosen"] += float(chosen.detach().sum())
                sums["rewards/rejected"] += float(rejected.detach().sum())
                tokens += sum(
                    len(encoded[i][0].input_ids) + len(encoded[i][1].input_ids) for i in group
                )
            sums = all_reduce_sum({**sums, "tokens": tokens}, run.ranks, device)
            throughput.tokens += int(sums.pop("tokens"))
            grad_norm = optimizer_step(
                params, optimizer, scheduler, config.max_grad_norm, run.ranks
            )
        throughput.items += len(index)
        metrics = {k: v / len(index) for k, v in sums.items()}
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
            pending = []
        stop = run.stop_requested()
        if run.checkpoints.due(step) or (stop and step < total_steps):
            run.save_checkpoint(
                step=step,
                model=model,
                tokenizer=tokenizer,
                optimizer=optimizer,
                scheduler=scheduler,
                trainer_state={"epoch": epoch, "batch_in_epoch": batch_index + 1, "kind": "rm"},
                extra_modules=extra_modules,
            )
        if stop and step < total_steps:
            status = "cancelled"
            break

    evaluation = evaluate_reward_model(
        scorer,
        encoded,
        eval_index,
        batch_size=micro,
        device=device,
        bf16=config.bf16,
        clusters=cluster_ids,
    )
    if evaluation:
        run.callback.on_log(step=step, metrics=evaluation)
    summary = {
        "kind": "rm",
        "pairs": len(pairs),
        "train_pairs": len(train_index),
        "eval_pairs": len(eval_index),
        "pairs_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": throughput.seconds,
        "pairs_per_second": throughput.per_second(throughput.items),
        "tokens_per_second": throughput.per_second(throughput.tokens),
        **scorer.fit.summary(),
        "packed": scorer.packed or scorer.encoder_packed,
        "bf16": config.bf16,
        "peak_memory_bytes": peak_memory_bytes(device),
        **evaluation,
    }
    if head is not None:
        summary["annotators"] = head.report()
        summary["annotator_votes"] = len(raw_votes)
    if conditioning is not None:
        summary["clusters"] = conditioning.report()
    if plain_summary:
        summary["plain/eval/accuracy"] = plain_summary.get("eval/accuracy")
        summary["plain/eval/reward_std"] = plain_summary.get("eval/reward_std")
    files: dict[str, Any] = {"reward_stats.json": evaluation} if evaluation else {}
    if conditioning is not None:
        files[CONDITIONING_FILE] = conditioning.payload()
    return finish_run(
        run,
        status=status,
        step=step,
        model=model,
        tokenizer=tokenizer,
        summary=summary,
        extra_files=files or None,
    )

"""Scoring with a trained reward model: loading it (``load_sequence_classifier``), with its optional
prompt-cluster conditioning (``cluster_conditioning.ClusterConditioning``), the scorer that fits and scores
(prompt, response) pairs (``RewardScorer``), and ``reward_scores`` for callers outside the recipes.

The reward-model recipe trains through the same scorer, the online recipes score rollouts with it,
and monitoring scores eval-round responses through ``training.recipes.reward_scores`` (the package
boundary the worker uses, imported on first use).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.recipes.aspect_head import AspectHead
from training.recipes.cluster_conditioning import ClusterConditioning
from training.recipes.data import ChatEncoder, FitLog, Messages, fit_prompt, token_limit
from training.recipes.lora import load_trained
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


@dataclass(frozen=True)
class RewardInput:
    """One (prompt, response) as the reward model reads it."""

    input_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...] | None = None


def load_sequence_classifier(
    path: str | Path,
    *,
    device: torch.device,
    tokenizer: Any,
    packing: bool = True,
    num_labels: int = 1,
) -> Any:
    """An AutoModelForSequenceClassification in float32 with ``num_labels`` outputs (1: a reward
    model; K: a reward ensemble's K heads on one encoder), a new head when ``path`` holds a base
    model, with the tokenizer's pad id so padded batches find each row's last token. A LoRA run's
    adapter folder loads as its base with the adapters and trained head merged in."""
    from transformers import AutoModelForSequenceClassification

    kwargs: dict[str, Any] = {"num_labels": num_labels, "dtype": torch.float32}
    model = None
    if packing:
        try:
            model = load_trained(
                AutoModelForSequenceClassification,
                path,
                attn_implementation=packed_attention_for("cpu"),
                **kwargs,
            )
        except (ValueError, ImportError):
            model = None
    if model is None:
        model = load_trained(AutoModelForSequenceClassification, path, **kwargs)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.use_cache = False
    return model.to(device)


class RewardScorer:
    """Encodes (prompt, response) pairs and returns scalar rewards [S] float32 for a reward model.

    Inputs are fitted to ``max_length`` and to the model's own limits (its position table, its
    tokenizer's ``model_max_length``): the response stays whole when the prompt keeps
    ``prompt_budget`` tokens beside it, and the prompt keeps the end of the conversation (see
    ``ChatEncoder``); what was cut is noted in ``fit``.

    With a ``ClusterConditioning`` (``condition_on``), each prompt's cluster comes from
    ``prompt_clusters``; prompts it does not know score as "no cluster". With an ``AspectHead``
    (``aspects``, a multi-aspect model) the reward is the weighted sum of the A outputs."""

    conditioning: ClusterConditioning | None = None
    aspects: AspectHead | None = None

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
        head = getattr(head, "original_module", head)  # LoRA: the head trained beside adapters
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

    def encode_list(self, prompt: Messages, responses: Sequence[str]) -> tuple[RewardInput, ...]:
        """Every response after one fitted prompt (a ranked list's, compared with each other)."""
        return tuple(self._encode(prompt, responses, (prompt, *responses)))

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
            fitted = self.chat_encoder.encode_responses(prompt, responses, key)
            return [RewardInput(seq.input_ids) for seq in fitted]
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
        """Rewards [S] float32 (with gradients when the model is training and grad is enabled):
        the first output of the model's head.

        ``clusters``: each input's cluster id for the attached ``ClusterConditioning`` (0: none)."""
        return self.score_members(inputs, clusters)[0]

    def score_members(
        self, inputs: Sequence[RewardInput], clusters: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Every member's reward, member-major: [K, S] float32, K = ``n_members``: the outputs of
        the model's head (1 for a plain reward model, K for a reward ensemble's shared encoder
        with K heads), or for a multi-aspect model one row, the aspects' weighted sum."""
        logits = self._conditioned_logits(inputs, clusters)
        if self.aspects is not None:
            weights = torch.tensor(self.aspects.weights, device=logits.device)
            return (logits @ weights)[None]
        return logits.T

    @property
    def n_members(self) -> int:
        """K: the rewards ``score_members`` gives per input."""
        return 1 if self.aspects is not None else int(self.model.config.num_labels)

    def _conditioned_logits(
        self, inputs: Sequence[RewardInput], clusters: Sequence[int] | None
    ) -> torch.Tensor:
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
        """The head's outputs [S, K] float32 for S inputs."""
        device = next(self.model.parameters()).device
        if self.packed:
            sequences = [TokenizedSequence(x.input_ids, len(x.input_ids)) for x in inputs]
            batch = build_batch(
                sequences, packed=True, pad_token_id=self.tokenizer.pad_token_id, device=device
            )
            hidden = last_hidden_states(self.model, batch).index_select(0, batch.last_index)
            return self.model.score(hidden).float()
        if self.encoder_packed:
            logits = packed_encoder_logits(
                self.model, [x.input_ids for x in inputs], [x.token_type_ids for x in inputs]
            )
            return logits.float()
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
        return self.model(**kwargs).logits.float()


ENSEMBLE_FILE = "ensemble.json"
ENSEMBLE_MODES = ("heads", "independent")


@dataclass(frozen=True)
class EnsembleManifest:
    """What ``ensemble.json`` in a reward-model folder says (the saved format the RL recipes read):

    - ``{"mode": "heads", "size": K, "members": []}``: the folder is one sequence classifier whose
      config has ``num_labels = K``; logit k is member k's reward;
    - ``{"mode": "independent", "size": K, "members": ["member_0", ..., "member_{K-1}"]}``: each
      member is a subfolder holding a plain single-output reward model.

    A folder without ``ensemble.json`` is a plain reward model, read as ``heads`` with K = 1."""

    mode: str
    size: int
    members: tuple[str, ...] = ()

    def payload(self) -> dict[str, Any]:
        return {"mode": self.mode, "size": self.size, "members": list(self.members)}

    @classmethod
    def independent(cls, size: int) -> EnsembleManifest:
        return cls("independent", size, tuple(f"member_{k}" for k in range(size)))

    @classmethod
    def read(cls, folder: str | Path) -> EnsembleManifest:
        """The manifest of ``folder`` (a plain reward model: heads, K = 1), checked against the
        folder; ValueError naming the file and the field when it does not hold."""
        file = Path(folder) / ENSEMBLE_FILE
        if not file.is_file():
            return cls("heads", 1)
        try:
            payload = json.loads(file.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{file}: not JSON ({error})") from error
        if not isinstance(payload, dict):
            raise ValueError(f"{file}: expected an object with mode, size and members")
        mode, size, members = payload.get("mode"), payload.get("size"), payload.get("members", [])
        if mode not in ENSEMBLE_MODES:
            raise ValueError(f"{file}: mode must be one of {ENSEMBLE_MODES}, got {mode!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"{file}: size must be an integer >= 1, got {size!r}")
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ValueError(f"{file}: members must be a list of folder names")
        if mode == "heads" and members:
            raise ValueError(f"{file}: members must be [] in mode 'heads', got {members}")
        if mode == "independent":
            if len(members) != size:
                raise ValueError(f"{file}: {len(members)} members listed for size {size}")
            for name in members:
                if Path(name).name != name or not (Path(folder) / name).is_dir():
                    raise ValueError(f"{file}: member {name!r} is not a subfolder of {folder}")
        return cls(mode, size, tuple(members))


class RewardEnsemble:
    """K reward models scoring the same (prompt, response) pairs: ``score`` -> [K, B].

    ``scorers``: one ``RewardScorer`` whose model has K outputs (mode ``heads``) or K scorers of
    one output each (mode ``independent``). A plain reward model is an ensemble of one. The online
    recipes score an independent ensemble through it too (``ensemble_scoring``)."""

    def __init__(
        self,
        manifest: EnsembleManifest,
        scorers: Sequence[RewardScorer],
        fit: FitLog | None = None,
    ) -> None:
        expected = 1 if manifest.mode == "heads" else manifest.size
        if len(scorers) != expected:
            raise ValueError(f"mode {manifest.mode!r} needs {expected} scorers, got {len(scorers)}")
        self.manifest = manifest
        self.scorers = list(scorers)
        self.fit = fit or self.scorers[0].fit  # the input-fitting log the members share, if any

    @property
    def mode(self) -> str:
        return self.manifest.mode

    @property
    def size(self) -> int:
        return self.manifest.size

    def eval(self) -> RewardEnsemble:
        for scorer in self.scorers:
            scorer.model.eval().requires_grad_(False)
        return self

    def share_clusters(self, variants: Sequence[Messages], originals: Sequence[Messages]) -> None:
        """Every member places ``variants`` in the clusters of ``originals`` (RewardScorer's)."""
        for scorer in self.scorers:
            scorer.share_clusters(variants, originals)

    def conditioned_clusters(self) -> int:
        return self.scorers[0].conditioned_clusters()

    def score_inputs(
        self,
        prompts: Sequence[Messages],
        responses: Sequence[str],
    ) -> torch.Tensor:
        """Member rewards [K, B] float32 for one batch of B (prompt, response) pairs, on the
        models' device, with gradients when the models train and grad is enabled."""
        rewards = member_rewards(self.scorers, prompts, responses)
        if rewards.shape[0] != self.size:
            raise ValueError(
                f"the models gave {rewards.shape[0]} rewards per input, not {self.size}"
            )
        return rewards

    @torch.no_grad()
    def score(
        self,
        prompts: Sequence[Messages | str],
        responses: Sequence[str],
        *,
        batch_size: int = 8,
    ) -> torch.Tensor:
        """Member rewards [K, B] float32 on the CPU for B (prompt, response) pairs, ``batch_size``
        pairs a forward. A prompt is ``((role, content), ...)`` (``data.Messages``) or a plain
        string, read as one user turn."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        if not prompts:
            return torch.zeros(self.size, 0)
        messages = [(("user", p),) if isinstance(p, str) else tuple(p) for p in prompts]
        parts = [
            self.score_inputs(
                messages[start : start + batch_size], responses[start : start + batch_size]
            ).cpu()
            for start in range(0, len(messages), batch_size)
        ]
        return torch.cat(parts, dim=1)


def ensemble_mean_std(member_rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ensemble's reward and its spread per response: [K, B] -> (mean [B], std [B]), std the
    population standard deviation over the K members (0 for one member), as in
    ``training.algorithms.ensemble``."""
    if member_rewards.dim() != 2 or member_rewards.shape[0] == 0:
        raise ValueError(f"member_rewards must be [K, B], got {tuple(member_rewards.shape)}")
    return member_rewards.mean(dim=0), member_rewards.var(dim=0, unbiased=False).sqrt()


def load_member_scorer(
    folder: str | Path,
    *,
    device: torch.device,
    num_labels: int,
    max_length: int,
    prompt_budget: int,
    packing: bool,
    fit: FitLog,
    prompt_clusters: Callable[[], dict[Messages, str]],
    aspect_weights: str | None = None,
) -> RewardScorer:
    """One frozen reward model (``num_labels`` outputs) in ``folder`` behind a scorer that fits
    inputs to ``max_length`` tokens with ``prompt_budget`` kept for the prompt, logging to ``fit``;
    ``packing`` packs a chat decoder's batch. A model trained with cluster conditioning is
    conditioned on ``prompt_clusters()`` (called only then: reading the clusters may read a file).
    A multi-aspect model (``aspects.json``) loads its A outputs and scores their weighted sum, with
    the saved weights or those of ``aspect_weights`` (``aspect_head.parse_aspect_weights``)."""
    from training.recipes.models import load_tokenizer

    aspects = AspectHead.read(folder)
    if aspects is not None:
        aspects, num_labels = aspects.reweighted(aspect_weights), len(aspects.aspects)
    tokenizer = load_tokenizer(folder)
    model = load_sequence_classifier(
        folder,
        device=device,
        tokenizer=tokenizer,
        packing=packing and bool(getattr(tokenizer, "chat_template", None)),
        num_labels=num_labels,
    )
    model.eval().requires_grad_(False)
    scorer = RewardScorer(
        model, tokenizer, max_length=max_length, prompt_budget=prompt_budget, fit=fit
    )
    scorer.aspects = aspects
    conditioning = ClusterConditioning.load(folder, model.get_input_embeddings().embedding_dim)
    if conditioning is not None:  # the reward model was trained per prompt cluster
        scorer.condition_on(conditioning.to(device).requires_grad_(False), prompt_clusters())
    return scorer


def member_rewards(
    scorers: Sequence[RewardScorer], prompts: Sequence[Messages], responses: Sequence[str]
) -> torch.Tensor:
    """Every output of every model behind ``scorers`` for B (prompt, response) pairs, one batch per
    scorer: rewards [K, B] on the models' device (K: the scorers' outputs together)."""
    rows = []
    for scorer in scorers:
        inputs = [scorer.encode(p, r) for p, r in zip(prompts, responses, strict=True)]
        rows.append(scorer.score_members(inputs, scorer.clusters_for(prompts)))
    return torch.cat(rows)


def load_reward_ensemble(
    path: str | Path,
    device: torch.device | str,
    *,
    max_length: int = 1024,
    prompt_budget: int = 512,
    packing: bool = False,
    prompt_clusters: dict[Messages, str] | None = None,
) -> RewardEnsemble:
    """The reward ensemble saved in ``path``, frozen in eval mode on ``device``: its ``score``
    gives member rewards [K, B] for B (prompt, response) pairs (``ensemble_mean_std`` gives the
    mean and std [B]).

    ``path`` is a reward-model run's final folder: with ``ensemble.json`` (``EnsembleManifest``)
    mode ``heads`` (one classifier with K outputs) or ``independent`` (K member subfolders, each
    a plain reward model); without it, a plain reward model (K = 1), scored exactly as
    ``RewardScorer`` scores it. Inputs are fitted to ``max_length`` tokens with ``prompt_budget``
    kept for the prompt; ``packing`` packs a chat decoder's batch; ``prompt_clusters`` places
    prompts in clusters for a member trained with cluster conditioning. ValueError naming the file
    when the folder does not match its manifest."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such reward-model folder")
    manifest = EnsembleManifest.read(folder)
    options: dict[str, Any] = {
        "device": torch.device(device),
        "max_length": max_length,
        "prompt_budget": prompt_budget,
        "packing": packing,
        "prompt_clusters": lambda: prompt_clusters or {},
    }
    if manifest.mode == "heads":
        options["fit"] = FitLog("samples")
        scorers = [load_member_scorer(folder, num_labels=manifest.size, **options)]
        outputs = scorers[0].n_members
        if outputs != manifest.size:
            raise ValueError(
                f"{folder}: {ENSEMBLE_FILE} says {manifest.size} heads, the model has {outputs}"
            )
    else:
        scorers = [
            load_member_scorer(folder / name, num_labels=1, fit=FitLog("samples"), **options)
            for name in manifest.members
        ]
    return RewardEnsemble(manifest, scorers)


def reward_scores(
    folder: str | Path,
    conversations: Sequence[Sequence[dict[str, str]]],
    texts: Sequence[str],
    *,
    max_length: int = 1024,
    batch_size: int = 8,
) -> list[float]:
    """Scalar rewards [N] of (conversation, response) pairs under the reward model in ``folder``,
    on the GPU when there is one, ``batch_size`` pairs a forward. ``conversations``: [N] lists of
    {"role", "content"} messages; ``texts``: [N] responses. Inputs are fitted to ``max_length``
    tokens (half kept for the prompt when needed). An ensemble (``ensemble.json``) scores with its
    members' mean (``load_reward_ensemble``); a multi-aspect model gives the weighted sum of its
    aspects with the weights saved beside it."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ensemble = load_reward_ensemble(
        folder, device, max_length=max_length, prompt_budget=max_length // 2
    )
    prompts = [tuple((m["role"], m["content"]) for m in conv) for conv in conversations]
    return ensemble.score(prompts, list(texts), batch_size=batch_size).mean(dim=0).tolist()

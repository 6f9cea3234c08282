"""What PPO, RLOO and GRPO share: loading the policy, reference and reward model; sampling responses
with the chat template, EOS handling, reward-model scoring, reward shaping, the KL controller named in
the config; the held-out evaluation; and the per-rollout statistics, reduced across ranks.

Shapes: R rollouts (prompts x samples), T response tokens.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from common.ngrams import repeated_ngram_share
from training.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    KLController,
    LinearKLSchedule,
    RewardNormalizer,
    VarianceKLScheduler,
    ensemble_disagreement,
    ensemble_reward,
    length_penalty,
    missing_eos_penalty,
)
from training.inference.engine import SamplingSettings
from training.inference.engine_choice import engine_for
from training.recipes.config import ConfigError, OnlineRLConfig
from training.recipes.data import ChatEncoder, FitLog, Messages, chunks, load_prompt_clusters
from training.recipes.distributed import Ranks, all_gather_rows, gather_objects
from training.recipes.ensemble_scoring import reward_members, score_member_texts
from training.recipes.lora import is_lora_model
from training.recipes.models import input_limit, load_policy, load_tokenizer, reference_model
from training.recipes.packing import TokenizedSequence
from training.recipes.runtime import autocast, rng_state, set_rng_state
from training.recipes.scoring import (
    EnsembleManifest,
    RewardEnsemble,
    RewardScorer,
    load_member_scorer,
)

# The held-out prompts depend on the data file only, not on the run's seed, so runs with different
# seeds on the same data are evaluated on the same prompts.
EVAL_SPLIT_SEED = 20_240_601


@dataclass
class OnlineModels:
    """What an online recipe loads: the trainable policy (``packed``: packed batches work with it),
    the frozen reference (None when the config needs none: GRPO with kl_coef 0), and the frozen
    reward model behind ``scorer`` (None when GRPO scores with verifiable rewards alone; an
    ``RewardEnsemble`` for an ensemble of independent reward models)."""

    tokenizer: Any  # the policy's, left padding for generation
    encoder: ChatEncoder
    policy: Any
    packed: bool
    reference: Any | None
    scorer: RewardScorer | RewardEnsemble | None


def load_online_models(
    config: OnlineRLConfig, *, device: torch.device, resume_from: Any = None
) -> OnlineModels:
    """Policy (from ``resume_from`` when resuming), reference (``ref_model`` or the starting policy;
    only when ``config.needs_reference``; with LoRA, the policy with its adapters off) and reward
    model (when ``config.reward_model`` names one), on ``device``; only the policy (its adapters,
    with LoRA) is trainable."""
    tokenizer = load_tokenizer(config.model, padding_side="left")
    encoder = ChatEncoder(
        tokenizer,
        max_length=policy_limit(config, tokenizer),
        prompt_budget=generation_prompt_budget(config, tokenizer),
        fit=FitLog("prompts"),
    )
    policy, packed = load_policy(resume_from or config.model, config, device)
    reference = None
    if config.needs_reference:
        reference = reference_model(
            config.ref_model or (None if is_lora_model(policy) else config.model),
            policy,
            device=device,
            packing=config.packing,
        )
    scorer = load_reward_scorer(config, device) if config.reward_model else None
    return OnlineModels(tokenizer, encoder, policy, packed, reference, scorer)


def load_reward_scorer(
    config: OnlineRLConfig, device: torch.device
) -> RewardScorer | RewardEnsemble:
    """The frozen reward model of ``config.reward_model`` behind a scorer, conditioned on the
    prompts' clusters when it was trained per cluster. An ensemble (``ensemble.json`` beside it):
    one scorer with K heads, or a ``RewardEnsemble`` over its K member folders."""
    manifest = EnsembleManifest.read(config.reward_model)  # a plain reward model: heads, K = 1
    if manifest.mode == "heads":
        return _load_member_scorer(
            config.reward_model, config, device, FitLog("samples"), num_labels=manifest.size
        )
    fit = FitLog("samples")
    members = [
        _load_member_scorer(folder, config, device, fit)
        for folder in (Path(config.reward_model) / name for name in manifest.members)
    ]
    return RewardEnsemble(manifest, members, fit)


def _load_member_scorer(
    folder: str | Path,
    config: OnlineRLConfig,
    device: torch.device,
    fit: FitLog,
    *,
    num_labels: int = 1,
) -> RewardScorer:
    """One frozen reward model (``num_labels`` heads) in ``folder`` behind a scorer. It reads the
    text again with its own tokenizer, so the prompt budget's tokens are not its tokens: room for
    the whole answer on top, within its own limits (RewardScorer). A multi-aspect model scores the
    weighted sum of its aspects (``reward_aspect_weights``, else the weights saved with it)."""
    return load_member_scorer(
        folder,
        device=device,
        num_labels=num_labels,
        max_length=config.max_length + config.max_new_tokens,
        prompt_budget=config.prompt_budget,
        packing=config.packing,
        fit=fit,
        prompt_clusters=lambda: load_prompt_clusters(config.data),
        aspect_weights=config.reward_aspect_weights,
    )


def policy_limit(config: OnlineRLConfig, tokenizer: Any) -> int:
    """The longest sequence (prompt + response) the policy and the reference may both read."""
    return min(
        input_limit(config.model, max_length=config.max_length, tokenizer=tokenizer),
        input_limit(config.ref_model or config.model, max_length=config.max_length),
    )


def generation_prompt_budget(config: OnlineRLConfig, tokenizer: Any) -> int:
    """Tokens a prompt may keep so that ``max_new_tokens`` more still fit ``policy_limit``."""
    limit = policy_limit(config, tokenizer)
    if limit - config.max_new_tokens < 1:
        raise ConfigError(
            f"max_new_tokens: {config.max_new_tokens} leaves no room for a prompt within "
            f"{limit} tokens (max_length and the models' position limits)"
        )
    return min(config.prompt_budget, limit // 2, limit - config.max_new_tokens)


ANSWER_FIELDS = ("chosen", "rejected", "response_a", "response_b")


def reference_answer_lengths(
    path: str | Path, tokenizer: Any, *, limit_rows: int = 200
) -> list[int]:
    """Token counts (the policy's tokenizer, plus one for EOS) of the answers the data's rows carry
    beside their prompt (an export's ``chosen``/``rejected``, an import file's ``response_a``/``b``),
    from the first ``limit_rows`` rows; empty for prompt-only files."""
    import json

    lengths: list[int] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if number >= limit_rows:
                break
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the recipe reports bad lines when it reads the file
            if not isinstance(row, dict):
                continue
            for name in ANSWER_FIELDS:
                value = row.get(name)
                if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
                    value = value[0].get("content")
                if isinstance(value, str):
                    lengths.append(len(tokenizer(value, add_special_tokens=False)["input_ids"]) + 1)
    return lengths


def eos_budget_warning(config: OnlineRLConfig, answer_lengths: Sequence[int]) -> str | None:
    """A start-up warning when ``max_new_tokens`` is obviously too small for the data's reference
    answers (most are longer) while the missing-EOS penalty is on: most samples would end without
    EOS, and the penalty would outweigh the normalised reward-model score. None when fine."""
    if not config.missing_eos_penalty or not answer_lengths:
        return None
    ordered = sorted(answer_lengths)
    longer = sum(n > config.max_new_tokens for n in ordered) / len(ordered)
    if longer <= 0.5:
        return None
    median = ordered[len(ordered) // 2]
    wanted = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    suggest = -(-wanted // 32) * 32
    return (
        f"max_new_tokens={config.max_new_tokens}: {longer:.0%} of the data's reference answers are "
        f"longer (median {median} tokens), so most samples will stop without EOS and take the "
        f"missing-EOS penalty ({config.missing_eos_penalty}), which then outweighs the reward "
        f"model's normalised score; raise it (--set max_new_tokens={suggest} fits 90% of them) or "
        f"turn the penalty off (--set missing_eos_penalty=0)"
    )


@dataclass
class Rollout:
    """One sampled response to one prompt."""

    prompt: Messages
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]  # up to and including the first EOS
    finished: bool  # emitted EOS
    text: str  # the response without special tokens, for the reward model

    def sequence(self) -> TokenizedSequence:
        return TokenizedSequence(self.prompt_ids + self.response_ids, len(self.prompt_ids))


@torch.no_grad()
def sample_rollouts(
    model: Any,
    tokenizer: Any,
    encoder: ChatEncoder,
    prompts: Sequence[Messages],
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int,
    greedy: bool = False,
    engine: str = "generate",
) -> list[Rollout]:
    """One sampled response per prompt, in order (repeat a prompt to sample it several times);
    ``greedy``: the most likely token at each step instead (no randomness drawn).

    Prompts are rendered with the chat template and left-padded, and the rollout ``engine``
    (``training.inference.engine``: 'generate', 'static', 'vllm' or 'auto') generates from them, a
    prompt held by several rows prefilled once; everything after a response's first EOS is
    dropped, and ``finished`` records whether the response emitted EOS at all (PIPELINE.md: mask
    after the first EOS, penalise when missing). Every engine draws from torch's global generator
    (directly, or one seed from it), so a restored RNG state samples the same rollouts.
    """
    encoded = [encoder.encode_prompt(p) for p in prompts]
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    settings = SamplingSettings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        greedy=greedy,
        eos_token_ids=(tokenizer.eos_token_id,),
    )
    output = engine_for(engine, model).generate(model, input_ids, attention, settings)
    rollouts = []
    for row, prompt in enumerate(prompts):
        kept = output.tokens[row]
        text = tokenizer.decode(kept, skip_special_tokens=True).strip()
        rollouts.append(
            Rollout(prompt, tuple(encoded[row]), tuple(kept), output.finished[row], text)
        )
    return rollouts


@torch.no_grad()
def score_rollout_members(
    scorer: RewardScorer | RewardEnsemble, rollouts: Sequence[Rollout], batch_size: int
) -> torch.Tensor:
    """Every reward-model member's scores [K, R] float32 (K = 1 for a plain reward model; the
    reward model reads text, so its tokenizer may differ; a cluster-conditioned one reads each
    prompt's cluster too)."""
    scores = []
    for start in range(0, len(rollouts), batch_size):
        part = rollouts[start : start + batch_size]
        scores.append(score_member_texts(scorer, [r.prompt for r in part], [r.text for r in part]))
    return torch.cat(scores, dim=1)


@dataclass(frozen=True)
class ObjectiveScores:
    """A batch's reward under the configured ensemble objective, ``reward`` [R], with the columns
    to log per rollout (``columns``: name -> [R]; empty for a single reward model, whose objective
    is its score)."""

    reward: torch.Tensor
    columns: dict[str, torch.Tensor]


def objective_scores(
    members: torch.Tensor, config: OnlineRLConfig, prefix: str = "ensemble/"
) -> ObjectiveScores:
    """``members`` [K, R] -> the configured ``reward_objective`` [R] (``ensemble_reward``), and,
    for an ensemble (K > 1), per-rollout columns: the members' disagreement (population std over
    members) and their plain mean, so the gap the objective opens shows beside it."""
    reward = ensemble_reward(members, config.reward_objective, uwo_lambda=config.uwo_lambda)
    if members.shape[0] == 1:
        return ObjectiveScores(reward, {})
    spread = ensemble_disagreement(members)
    return ObjectiveScores(
        reward,
        {f"{prefix}disagreement_std": spread.std, f"{prefix}member_mean": members.mean(dim=0)},
    )


@torch.no_grad()
def score_rollouts(
    scorer: RewardScorer | RewardEnsemble,
    rollouts: Sequence[Rollout],
    batch_size: int,
    config: OnlineRLConfig,
) -> ObjectiveScores:
    """The reward model's scores [R] under ``config.reward_objective`` (a plain reward model: its
    score, bit for bit), with the ensemble's logging columns (``objective_scores``)."""
    return objective_scores(score_rollout_members(scorer, rollouts, batch_size), config)


def shape_rewards(
    scores: torch.Tensor,
    rollouts: Sequence[Rollout],
    config: OnlineRLConfig,
    normalizer: RewardNormalizer | None,
) -> torch.Tensor:
    """Normalised score, minus the length and missing-EOS penalties: [R] float32."""
    rewards = normalizer(scores) if normalizer is not None else scores.float()
    lengths = torch.tensor([len(r.response_ids) for r in rollouts])
    if config.length_penalty_coef:
        rewards = length_penalty(
            rewards,
            lengths,
            coef=config.length_penalty_coef,
            base_length=config.length_penalty_base,
        )
    if config.missing_eos_penalty:
        finished = torch.tensor([r.finished for r in rollouts])
        rewards = missing_eos_penalty(rewards, finished, penalty=config.missing_eos_penalty)
    return rewards


def response_repetition(rollout: Rollout, n: int = 3) -> float | None:
    """Share of the response's token n-grams that already appeared earlier in it; None when the
    response is shorter than n tokens."""
    return repeated_ngram_share(rollout.response_ids, n=n)


def repetition_rate(rollouts: Sequence[Rollout], n: int = 3) -> float:
    """Mean share of each response's token n-grams that already appeared earlier in the same
    response (0: no repeats; PIPELINE.md alerts above 0.10 as mode collapse)."""
    rates = [r for r in (response_repetition(x, n) for x in rollouts) if r is not None]
    return sum(rates) / len(rates) if rates else 0.0


def rollout_metrics(
    rollouts: Sequence[Rollout],
    *,
    scores: torch.Tensor,
    shaped: torch.Tensor,
    kl: torch.Tensor,
    ranks: Ranks,
    device: torch.device,
    missing_eos_penalty: float = 0.0,
    **more: torch.Tensor,
) -> tuple[dict[str, float], int, int]:
    """The health metrics of one step's rollouts on every rank, as if one process held them all:
    (metrics, rollouts, tokens) summed over ranks. ``missing_eos_penalised`` is the share of
    rollouts the missing-EOS penalty hit (0 while ``missing_eos_penalty`` is off): above a half,
    the penalty rather than the reward model drives the policy (a monitoring alert).

    scores, shaped, kl: [R] per rollout (raw reward-model score, shaped reward, summed KL);
    ``more``: other [R] columns whose mean is logged under their name.
    """
    repetition = [response_repetition(r) for r in rollouts]
    columns = {
        "score": scores.float().cpu(),
        "shaped": shaped.float().cpu(),
        "kl": kl.detach().float().cpu(),
        "length": torch.tensor([len(r.response_ids) for r in rollouts], dtype=torch.float32),
        "tokens": torch.tensor(
            [len(r.prompt_ids) + len(r.response_ids) for r in rollouts], dtype=torch.float32
        ),
        "finished": torch.tensor([float(r.finished) for r in rollouts]),
        "repetition": torch.tensor([math.nan if x is None else x for x in repetition]),
        **{name: column.detach().float().cpu() for name, column in more.items()},
    }
    local = torch.stack(list(columns.values()), dim=1).reshape(len(rollouts), len(columns))
    rows = all_gather_rows(local.to(device), ranks).cpu()
    every = dict(zip(columns, rows.unbind(dim=1), strict=True))
    n = rows.shape[0]
    repeats = every["repetition"][~every["repetition"].isnan()]
    metrics = {
        "reward/score_mean": float(every["score"].mean()),
        "reward/score_std": float(every["score"].std()) if n > 1 else 0.0,
        "reward/shaped_mean": float(every["shaped"].mean()),
        "kl": float(every["kl"].mean()),
        "response_length": float(every["length"].mean()),
        "repetition_rate": float(repeats.mean()) if repeats.numel() else 0.0,
        "eos_rate": float(every["finished"].mean()),
        "missing_eos_penalised": float(1 - every["finished"].mean())
        if missing_eos_penalty
        else 0.0,
        **{name: float(every[name].mean()) for name in more},
    }
    return metrics, n, int(every["tokens"].sum())


def require_prompts_per_rank(n_prompts: int, batch_size: int, ranks: Ranks) -> None:
    """Every rank must get at least one prompt of every step (the last batch of an epoch may be
    short): a clear error up front instead of a rank with nothing to do."""
    last = n_prompts - (-(-n_prompts // batch_size) - 1) * batch_size
    smallest = min(batch_size, last)
    if smallest < ranks.world:
        raise ConfigError(
            f"batch_size: each of the {ranks.world} processes needs a prompt in every step, but "
            f"the smallest batch has {smallest} ({n_prompts} training prompts in batches of "
            f"{batch_size})"
        )


def update_passes(n_samples: int, per_prompt: int, micro_batch_size: int | None) -> list[slice]:
    """The forward passes of one update over a rank's ``n_samples`` samples (prompt after prompt,
    ``per_prompt`` each): ``micro_batch_size`` prompts with all their samples per pass, so a
    prompt's samples stay together (their prompt runs once and their group is whole); None: one
    pass. The passes' gradients add up to the one-pass gradient (each pass's loss is its share
    of the whole batch's)."""
    if micro_batch_size is None:
        return [slice(0, n_samples)]
    width = micro_batch_size * per_prompt
    return [slice(i, min(i + width, n_samples)) for i in range(0, n_samples, width)]


def gather_scores(scores: torch.Tensor, ranks: Ranks, device: torch.device) -> torch.Tensor:
    """Every rank's raw scores [R_r], concatenated in rank order (for the normaliser's fit)."""
    return all_gather_rows(scores.float().to(device), ranks).cpu()


def split_eval_prompts(
    prompts: Sequence[Messages], count: int
) -> tuple[list[Messages], list[Messages]]:
    """(training prompts, held-out prompts), both in file order: ``count`` prompts, at most a tenth
    of the file (at least one from two prompts on), drawn with a fixed seed."""
    n = len(prompts)
    held = min(count, max(1, n // 10)) if count > 0 and n >= 2 else 0
    order = torch.randperm(n, generator=torch.Generator().manual_seed(EVAL_SPLIT_SEED)).tolist()
    chosen = set(order[:held])
    train = [p for i, p in enumerate(prompts) if i not in chosen]
    return train, [prompts[i] for i in sorted(chosen)]


def eval_due(config: OnlineRLConfig, step: int, total_steps: int, n_eval_prompts: int) -> bool:
    return n_eval_prompts > 0 and (step % config.eval_every == 0 or step == total_steps)


@contextlib.contextmanager
def _rng_untouched(device: torch.device) -> Iterator[None]:
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        yield


@torch.no_grad()
def evaluate_policy(
    models: OnlineModels,
    prompts: Sequence[Messages],
    config: OnlineRLConfig,
    *,
    ranks: Ranks,
    device: torch.device,
    score: Callable[[list[Rollout]], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Greedy responses of the policy to the held-out ``prompts`` (each rank answers its block),
    scored by the reward model: eval_reward_mean and eval_reward_std (raw scores under the
    configured ensemble objective: the training normaliser clamps to its range, which would
    flatten the curve the plateau rule reads), mean response length and EOS rate. With an
    ensemble of K reward models, also each member's mean (eval_reward_member_0 .. K-1) and the
    members' mean disagreement on these answers (eval_ensemble_disagreement: population std over
    members, averaged over answers; the "ensemble disagreement rising" alert reads it).
    ``score(rollouts) -> [R]`` replaces the reward model (GRPO's verifiable rewards). Draws no
    randomness, so training continues exactly as without it."""
    heads = 1 if score is not None or models.scorer is None else reward_members(models.scorer)
    width = 3 if heads == 1 else 4 + heads  # score, length, EOS (+ K members, disagreement)
    rows: list[list[float]] = []
    with _rng_untouched(device):
        for part in chunks(ranks.block(prompts), config.batch_size):
            with autocast(device, config.bf16):
                rollouts = sample_rollouts(
                    models.policy,
                    models.tokenizer,
                    models.encoder,
                    part,
                    max_new_tokens=config.max_new_tokens,
                    greedy=True,
                    engine=config.engine,
                )
                if score is not None:
                    scores, members = score(rollouts), None
                else:
                    members = score_rollout_members(
                        models.scorer, rollouts, batch_size=len(rollouts)
                    )
                    scores = objective_scores(members, config).reward
            extra: list[list[float]] = [[] for _ in rollouts]
            if members is not None and heads > 1:
                extra = torch.cat([members, ensemble_disagreement(members).std[None]]).T.tolist()
            rows += [
                [float(s), float(len(r.response_ids)), float(r.finished), *more]
                for s, r, more in zip(scores.tolist(), rollouts, extra, strict=True)
            ]
    local = torch.tensor(rows, dtype=torch.float64).reshape(len(rows), width)
    every = all_gather_rows(local.to(device), ranks).cpu()
    scores, lengths, finished = every[:, 0], every[:, 1], every[:, 2]
    metrics = {
        "eval_reward_mean": float(scores.mean()),
        "eval_reward_std": float(scores.std()) if len(scores) > 1 else 0.0,
        "eval_response_length": float(lengths.mean()),
        "eval_eos_rate": float(finished.mean()),
    }
    if heads > 1:
        for k in range(heads):
            metrics[f"eval_reward_member_{k}"] = float(every[:, 3 + k].mean())
        metrics["eval_ensemble_disagreement"] = float(every[:, -1].mean())
    return metrics


def rank_rng_states(ranks: Ranks) -> list[dict[str, Any]] | None:
    """Every rank's RNG state for a checkpoint (None in one process: the checkpoint's own RNG state
    is the whole story there)."""
    return gather_objects(rng_state(), ranks) if ranks.distributed else None


def restore_rank_rng(states: list[dict[str, Any]] | None, ranks: Ranks) -> None:
    """Put back this rank's RNG state saved by ``rank_rng_states`` (same world size only)."""
    if ranks.distributed and states is not None and len(states) == ranks.world:
        set_rng_state(states[ranks.rank])


def make_kl_controller(config: OnlineRLConfig, total_updates: int) -> KLController:
    """The controller named by ``config.kl_controller`` with the config's numbers."""
    if config.kl_controller == "adaptive":
        return AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)
    if config.kl_controller == "variance":
        return VarianceKLScheduler(config.kl_coef)
    if config.kl_controller == "linear":
        return LinearKLSchedule(config.kl_linear_start, config.kl_linear_end, max(1, total_updates))
    return FixedKLController(config.kl_coef)


def fit_normalizer(config: OnlineRLConfig, scores: torch.Tensor) -> RewardNormalizer | None:
    """Min-max normaliser fitted on the first batch's raw scores (the reference set); None when
    normalisation is off or the batch has a single distinct score."""
    if config.reward_range is None or float(scores.max()) <= float(scores.min()):
        return None
    low, high = config.reward_range
    return RewardNormalizer.fit(scores, low=low, high=high)

"""The farm's evaluations (issue #34): every checkpoint of an RL run, and the starting policy, answer
the farm's held-out prompts; gold and the run's reward model (or ensemble) score the same answers,
and the answers' figures are counted. The rows are bench/farm_rules.py's curve rows. Worker-side
code: torch and transformers are imported inside the functions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class GoldScorer(Protocol):
    def score(self, prompts: Sequence[str], answers: Sequence[str]) -> np.ndarray: ...


def policy_answers(
    model_dir: str | Path,
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    temperature: float | None = None,
    seed: int = 0,
    batch_size: int = 32,
) -> list[str]:
    """The model's answers to ``prompts`` (chat template, left-padded batches of ``batch_size``):
    greedy, or sampled at ``temperature`` with torch seeded by ``seed`` (same model, prompts and
    seed: same answers)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    sampling = {"do_sample": False}
    if temperature is not None:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0}
        torch.manual_seed(seed)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in prompts
    ]
    answers: list[str] = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            encoded = tokenizer(
                texts[start : start + batch_size], return_tensors="pt", padding=True,
                add_special_tokens=False,
            )  # fmt: skip
            out = model.generate(
                **encoded, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id, **sampling,
            )  # fmt: skip
            width = encoded["input_ids"].shape[1]
            answers += tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return answers


def answer_row(
    prompts: Sequence[str], answers: Sequence[str], gold: np.ndarray, members: np.ndarray
) -> dict[str, Any]:
    """The figures of one evaluation's answers: gold [N] and the reward models' member rewards
    [K, N] -> proxy (mean of the members' mean), gold (mean), words, phrase, repetition, rho
    (Spearman of member-mean against gold; None when undefined), disagreement (mean over answers of
    the members' population std; None for K = 1)."""
    from bench.farm_synthetic import phrase_rate, word_count
    from monitoring.stats.stopping import reward_human_correlation, text_repetition_rate

    if members.ndim != 2 or members.shape[1] != len(answers) or gold.shape != (len(answers),):
        raise ValueError(f"members {members.shape} and gold {gold.shape} for {len(answers)}")
    mean = members.mean(axis=0)
    rho = reward_human_correlation(mean, gold).rho
    return {
        "proxy": float(mean.mean()),
        "gold": float(gold.mean()),
        "words": word_count(answers),
        "phrase": phrase_rate(answers),
        "repetition": float(np.mean([text_repetition_rate(a) for a in answers])),
        "rho": None if np.isnan(rho) else float(rho),
        "disagreement": float(members.std(axis=0).mean()) if members.shape[0] > 1 else None,
    }


def checkpoint_curve(
    run: Any,
    reward_model: Path,
    gold: GoldScorer,
    prompts: Sequence[str],
    *,
    start_policy: Path,
    max_new_tokens: int,
    temperature: float = 0.7,
    gold_every: int = 1,
) -> list[dict[str, Any]]:
    """One row per checkpoint of ``run`` (step order) after a row for ``start_policy`` (step 0, KL
    0): ``answer_row`` of answers sampled at ``temperature`` (seed 0) to ``prompts``, with the step,
    the run's KL at that step (nats: its evaluation KL ``eval_kl`` when logged, else the training
    batch's ``kl``, which is kept as ``kl_train``) and its own ``eval_reward_mean``
    (``proxy_app``). Gold's
    mean is recorded as the run's ``gold_reward_mean`` metric (the stopping panel's gold points) at
    every ``gold_every``-th checkpoint, as rated rounds are rarer than evaluations (``gold_rated``
    marks those rows)."""
    from training import services
    from training.models import MetricPoint
    from training.recipes.scoring import load_reward_ensemble

    ensemble = load_reward_ensemble(reward_model, "cpu", max_length=256, prompt_budget=128)
    points = [(0, start_policy)] + [
        (c.step, Path(c.path)) for c in run.checkpoints.order_by("step") if Path(c.path).is_dir()
    ]  # a checkpoint past the run's keep_checkpoints is gone
    rows = []
    for index, (step, folder) in enumerate(points):
        answers = policy_answers(folder, prompts, max_new_tokens, temperature=temperature)
        gold_scores = np.asarray(gold.score(prompts, answers), dtype=float)
        members = ensemble.score(list(prompts), answers).numpy().astype(float)
        logged = dict(MetricPoint.objects.filter(run=run, step=step).values_list("name", "value"))
        rated = index > 0 and index % gold_every == 0
        if rated:
            services.metrics_record(
                run_id=run.pk, step=step, metrics={"gold_reward_mean": float(gold_scores.mean())}
            )
        rows.append(
            {"step": step, "kl": 0.0 if step == 0 else logged.get("eval_kl", logged.get("kl")),
             "kl_train": 0.0 if step == 0 else logged.get("kl"),
             "proxy_app": logged.get("eval_reward_mean"), "gold_rated": rated,
             **answer_row(prompts, answers, gold_scores, members)}
        )  # fmt: skip
    return rows


def gold_verdict(gold_checkpoint: float, gold_baseline: float, draw: float) -> tuple[str, int]:
    """A simulated reviewer's verdict on one eval item from gold: ("checkpoint" | "baseline" |
    "tie", usefulness 1-5). The checkpoint is preferred with gold's Bradley-Terry probability
    sigmoid(g_c - g_b) (``draw`` uniform in [0, 1)), a tie when gold scores both alike; usefulness
    3 + (g_c - g_b) rounded and clipped to 1-5 (how much more useful than the baseline)."""
    gap = gold_checkpoint - gold_baseline
    usefulness = int(min(5, max(1, round(3 + gap))))
    if gap == 0:
        return "tie", usefulness
    return ("checkpoint" if draw < 1 / (1 + np.exp(-gap)) else "baseline"), usefulness


def gold_rated_round(
    *,
    checkpoint: Any,
    project: Any,
    gold: GoldScorer,
    baseline_model: str,
    size: int,
    max_new_tokens: int,
    seed: int,
    reviewers: int = 3,
) -> dict[str, Any]:
    """An eval round of ``size`` held-out prompts of ``project`` on ``checkpoint`` against
    ``baseline_model``, through the eval-round services: ``round_create``, ``round_generate`` (both
    answers, in process), then ``reviewers`` simulated reviewers claim items (``eval_claim_next``)
    and rate them from gold (``gold_verdict``) with ``eval_submit``, until the round closes.
    Returns the round's id, status, ratings and the checkpoint's share of wins (a tie a half)."""
    from django.contrib.auth import get_user_model

    from common.roles import REVIEWER, role_assign
    from monitoring.models import EvalAssignment
    from monitoring.services import eval_rounds as services

    # The policies' own sampling, as in training and the curve (temperature 0.7, nothing cut):
    # the rounds' defaults for chat models (top_p 0.9, repetition penalty 1.1) change which
    # answers these tiny domain models give, and not alike for the start and its checkpoints.
    sampling = {"max_new_tokens": max_new_tokens, "temperature": 0.7, "top_p": 1.0,
                "repetition_penalty": 1.0, "seed": seed}  # fmt: skip
    round_ = services.round_create(
        checkpoint=checkpoint, project=project, size=size, created_by=None,
        baseline_model=baseline_model, sampling=sampling, seed=seed, enqueue=False,
    )  # fmt: skip
    round_ = services.round_generate(round_id=round_.pk)
    rng = np.random.default_rng(seed)
    picks: list[str] = []
    for k in range(reviewers):
        user, _ = get_user_model().objects.get_or_create(username=f"farm-reviewer-{k}")
        role_assign(user=user, role=REVIEWER)
        while (assignment := services.eval_claim_next(reviewer=user, round_=round_)) is not None:
            item = assignment.item
            prompt = item.prompt.text
            g_c, g_b = gold.score([prompt, prompt], [item.checkpoint_text, item.baseline_text])
            side, usefulness = gold_verdict(float(g_c), float(g_b), float(rng.random()))
            left = assignment.shown_left == EvalAssignment.Side.CHECKPOINT
            pick = (
                "tie" if side == "tie" else ("left" if (side == "checkpoint") == left else "right")
            )
            services.eval_submit(
                assignment=assignment, reviewer=user, pick=pick, usefulness=usefulness
            )
            picks.append(side)
            round_.refresh_from_db()
    round_.refresh_from_db()
    wins = [1.0 if p == "checkpoint" else 0.5 if p == "tie" else 0.0 for p in picks]
    return {
        "round": round_.pk, "status": str(round_.status), "ratings": len(picks),
        "checkpoint_win_rate": float(np.mean(wins)) if wins else None,
    }  # fmt: skip

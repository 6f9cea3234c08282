"""GRPO on SmolLM2-135M-Instruct: Concord's recipe against TRL's GRPOTrainer, same policy, prompts,
G samples per prompt, response budget, learning rate, precision and one cheap verifiable reward on
both sides, -|60 - characters of the completion| / 60 (so the time goes to generation and the
update, not to a reward model). Prints one JSON object.

Both sides: temperature 1.0, top-p 1.0, no top-k, kl_coef / beta 0 (no reference model: TRL's
default), one update per batch (num_iterations 1), token-level loss (DAPO; TRL's default "dapo"),
std scaling within the group, epsilon 0.2, no gradient checkpointing, one optimiser step per batch of
prompts x G samples (TRL: per_device_train_batch_size = prompts x G, steps_per_generation 1).
Sampled lengths differ between the two (sampling is random), so the mean response length is reported
beside samples per second. Each side runs in its own subprocess (its peak RSS is its own); the sides
alternate for ``--rounds`` rounds and the fastest round of each is reported.

``--check`` first verifies that both compute the same thing on the same completions: Concord's
sampler answers 4 prompts twice; Concord's log-probability path and TRL's
``_get_per_token_logps_and_entropies`` score the same token ids, and the completion tokens each
would train on are counted (ours: up to and including the first EOS; TRL: its completion mask
formula on the same ids).

    .venv/bin/python bench/bench_grpo_vs_trl.py [--prompts 16] [--g 4] [--new-tokens 32]
        [--steps 1] [--precision fp32|bf16] [--rounds 2] [--skip-trl] [--check]
        [--passes N] [--engine generate|static|llamacpp|auto]

``--engine`` picks our side's rollout engine (default ``generate``, as bench/README.md's
figures were taken; ``static`` is the preallocated-cache engine of issue 37, ``llamacpp`` the
llama.cpp engine).

``--passes N`` splits each step's update into N forward/backward passes on both sides, the same
optimiser step (all prompts x G samples generated in one batch first): ours with
``micro_batch_size`` = prompts / N, TRL with N gradient-accumulation steps. It is how each tool fits
a large step into memory (TRL's single 64-sample pass of 128 tokens was killed above 17 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import side_by_side

LEARNING_RATE = 1e-6
TARGET_CHARACTERS = 60


def length_reward(completions: list, **_: object) -> list[float]:
    """TRL's side of the reward: completions are message lists (conversational prompts)."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [-abs(TARGET_CHARACTERS - len(text)) / TARGET_CHARACTERS for text in texts]


def _ours_config(args: argparse.Namespace, output_dir: str):
    from training.recipes import GRPOConfig

    return GRPOConfig(
        model=side_by_side.model_folder(),
        data=args.data,
        output_dir=output_dir,
        rewards=(f'length_penalty {{"target": {TARGET_CHARACTERS}}}',),
        batch_size=args.prompts,
        group_size=args.g,
        max_new_tokens=args.new_tokens,
        max_length=512,
        max_steps=args.steps,
        learning_rate=LEARNING_RATE,
        kl_coef=0.0,
        temperature=1.0,
        top_p=1.0,
        bf16=args.precision == "bf16",
        checkpoint_every=0,
        resume=False,
        device="cpu",
        eval_prompts=0,  # TRL trains on every prompt and evaluates nothing
        micro_batch_size=args.prompts // args.passes if args.passes > 1 else None,
        engine=args.engine,
    )


def run_ours(args: argparse.Namespace) -> dict:
    from training.recipes import train_grpo

    config = _ours_config(args, str(Path(args.work) / f"ours-{args.precision}"))
    result = train_grpo(config)
    rows = [
        json.loads(line)
        for line in (Path(config.output_dir) / "metrics.jsonl").read_text().splitlines()
    ]
    summary = result.summary
    return {
        "samples": summary["samples_trained"],
        "samples_per_second": summary["samples_per_second"],
        "train_seconds": summary["train_seconds"],
        "mean_response_length": sum(r["response_length"] for r in rows) / len(rows),
        "reward_mean": sum(r["reward/score_mean"] for r in rows) / len(rows),
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
    }


def _trl_trainer(args: argparse.Namespace, output_dir: str, max_steps: int):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model_dir = side_by_side.model_folder()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    dataset = Dataset.from_list([{"prompt": side_by_side.as_messages(r["prompt"])} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # --passes N: the same optimiser step (prompts x G samples, generated in one batch) in N
    # forward/backward passes of prompts x G / N.
    passes = args.passes
    config = GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=args.prompts * args.g // passes,
        num_generations=args.g,
        steps_per_generation=passes,
        gradient_accumulation_steps=passes,
        max_completion_length=args.new_tokens,
        max_steps=max_steps,
        learning_rate=LEARNING_RATE,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        bf16=args.precision == "bf16",
        **side_by_side.TRL_CPU,
    )
    return GRPOTrainer(
        model=policy,
        reward_funcs=length_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def run_trl(args: argparse.Namespace) -> dict:
    import trl

    trainer = _trl_trainer(args, str(Path(args.work) / f"trl-{args.precision}"), args.steps)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logs = [r for r in trainer.state.log_history if "completions/mean_length" in r]
    samples = args.prompts * args.g * args.steps
    return {
        "samples": samples,
        "samples_per_second": samples / seconds,
        "train_seconds": seconds,
        "mean_response_length": sum(r["completions/mean_length"] for r in logs) / len(logs),
        "reward_mean": sum(r["reward"] for r in logs) / len(logs),
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "trl_version": trl.__version__,
    }


def check_same_computation(args: argparse.Namespace) -> dict:
    """Both sides' per-token log-probs and trained-token counts on the same sampled completions."""
    import torch

    from training.recipes.online import load_online_models, sample_rollouts
    from training.recipes.packing import build_batch, completion_token_logprobs

    torch.manual_seed(0)
    config = _ours_config(args, str(Path(args.work) / "check"))
    models = load_online_models(config, device=torch.device("cpu"))
    prompts = [json.loads(line)["prompt"] for line in Path(args.data).read_text().splitlines()]
    asked = [((("user", p),) if isinstance(p, str) else p) for p in prompts[:4] for _ in range(2)]
    rollouts = sample_rollouts(
        models.policy, models.tokenizer, models.encoder, asked,
        temperature=1.0, max_new_tokens=args.new_tokens, engine=args.engine,
    )  # fmt: skip
    sequences = [r.sequence() for r in rollouts]
    batch = build_batch(sequences, packed=False, pad_token_id=models.tokenizer.pad_token_id,
                        device=torch.device("cpu"))  # fmt: skip
    with torch.no_grad():
        ours, _ = batch.to_padded(completion_token_logprobs(models.policy, batch, temperature=1.0))

    trainer = _trl_trainer(args, str(Path(args.work) / "trl-check"), 1)
    pad = models.tokenizer.pad_token_id
    width_p = max(len(r.prompt_ids) for r in rollouts)
    width_c = max(len(r.response_ids) for r in rollouts)
    prompt_ids = torch.tensor([[pad] * (width_p - len(r.prompt_ids)) + list(r.prompt_ids)
                               for r in rollouts])  # fmt: skip
    completion_ids = torch.tensor([list(r.response_ids) + [pad] * (width_c - len(r.response_ids))
                                   for r in rollouts])  # fmt: skip
    prompt_mask = torch.tensor([[0] * (width_p - len(r.prompt_ids)) + [1] * len(r.prompt_ids)
                                for r in rollouts])  # fmt: skip
    # TRL's completion mask (grpo_trainer.py): every token up to and including the first EOS.
    is_eos = torch.isin(completion_ids, torch.tensor(trainer.eos_token_ids))
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    completion_mask = (torch.arange(is_eos.size(1)).expand_as(is_eos) <= eos_idx[:, None]).int()
    with torch.no_grad():
        theirs, *_ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, completion_mask], dim=1),
            width_c,
        )
    ours_mask = torch.zeros_like(completion_mask, dtype=torch.bool)
    for row, r in enumerate(rollouts):
        ours_mask[row, : len(r.response_ids)] = True
    both = ours_mask & completion_mask.bool()
    return {
        "completions": len(rollouts),
        "tokens_trained_ours": int(ours_mask.sum()),
        "tokens_trained_trl": int(completion_mask.sum()),
        "max_abs_logprob_difference": float((ours[both] - theirs.float()[both]).abs().max()),
    }


def _child(side: str, args: argparse.Namespace) -> dict:
    options = side_by_side.forwarded(
        args, "precision", "data", "work", "prompts", "g", "new_tokens", "steps", "passes", "engine"
    )
    return side_by_side.run_worker(__file__, "--worker", side, *options)


def bench(args: argparse.Namespace, work: Path) -> dict:
    """Both sides alternated for ``args.rounds`` rounds; the report."""
    args.work, args.data = str(work), str(work / "prompts.jsonl")
    n_prompts = side_by_side.write_prompts(Path(args.data), args.prompts * args.steps)
    report: dict = {
        "benchmark": "grpo_vs_trl",
        "model": "smollm2-135m-instruct",
        "prompts": n_prompts,
        "samples_per_prompt": args.g,
        "max_new_tokens": args.new_tokens,
        "precision": args.precision,
        "passes": args.passes,
        "engine": args.engine,
        "cpu_flags": side_by_side.cpu_flags(),
        "load_average_at_start": os.getloadavg(),
    }
    if args.check:
        report["check"] = _child("check", args)
    report.update(
        side_by_side.run_sides(args, lambda side: _child(side, args), rate="samples_per_second"),
        load_average_at_end=os.getloadavg(),
    )
    return report


WORKERS = {"ours": run_ours, "trl": run_trl, "check": check_same_computation}


def main() -> None:
    from training.recipes.config import ROLLOUT_ENGINES  # no torch: the help stays quick

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--g", type=int, default=4, help="samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument(
        "--passes", type=int, default=1,
        help="both sides: each step's update in this many forward/backward passes",
    )  # fmt: skip
    parser.add_argument("--check", action="store_true", help="check both compute the same")
    parser.add_argument(
        "--engine", default="generate", choices=ROLLOUT_ENGINES,
        help="our side's rollout engine (training.inference.engine)",
    )  # fmt: skip
    args = side_by_side.parse_options(
        parser, precision="fp32", precisions=("fp32", "bf16"), rounds=2, workers=WORKERS
    )
    if args.passes < 1 or args.prompts % args.passes:
        parser.error(f"--passes must divide --prompts {args.prompts}, got {args.passes}")

    side_by_side.run_script(args, name="grpo", workers=WORKERS, bench=bench)


if __name__ == "__main__":
    main()

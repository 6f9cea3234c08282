"""RLOO on SmolLM2-135M-Instruct: Concord's recipe against TRL's RLOOTrainer, same policy, reward
model, prompts, K samples per prompt, response length, learning rate and precision. Prints one JSON
object.

Prompts: the first ``--prompts`` demo prompts (demo/prompts.jsonl). Reward model: SmolLM2 with a new
one-output head (the speed does not depend on what it has learnt). Sampling at temperature 1.0,
top-p 1.0, KL coefficient 0.02, no gradient checkpointing. Sampled lengths differ between the two
(sampling is random), so the mean response length is reported beside samples per second and each
side's tokens per second. Each side runs in its own subprocess; the sides alternate for
``--rounds`` rounds and the fastest round of each is reported.

    .venv/bin/python bench/bench_train_rloo_vs_trl.py [--prompts 8] [--k 4] [--new-tokens 32]
        [--steps 2] [--precision fp32|bf16] [--rounds 2] [--skip-trl] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import side_by_side

LEARNING_RATE = 1e-6
KL_COEF = 0.02


def run_ours(args: argparse.Namespace) -> dict:
    from training.recipes import RLOOConfig, train_rloo

    model = side_by_side.model_folder()
    config = RLOOConfig(
        model=model,
        reward_model=model,
        data=args.data,
        output_dir=str(Path(args.work) / f"ours-{args.precision}"),
        batch_size=args.prompts,
        rloo_k=args.k,
        max_new_tokens=args.new_tokens,
        max_length=256,
        max_steps=args.steps,
        learning_rate=LEARNING_RATE,
        kl_coef=KL_COEF,
        temperature=1.0,
        top_p=1.0,
        bf16=args.precision == "bf16",
        checkpoint_every=0,
        resume=False,
        device="cpu",
        eval_prompts=0,  # TRL's RLOO trains on every prompt and evaluates nothing
    )
    result = train_rloo(config)
    rows = [
        json.loads(line)
        for line in (Path(config.output_dir) / "metrics.jsonl").read_text().splitlines()
    ]
    summary = result.summary
    return {
        "samples": summary["samples_trained"],
        "samples_per_second": summary["samples_per_second"],
        "tokens_per_second": summary["tokens_per_second"],
        "train_seconds": summary["train_seconds"],
        "mean_response_length": sum(r["response_length"] for r in rows) / len(rows),
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
    }


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl import RLOOConfig, RLOOTrainer

    model_dir = side_by_side.model_folder()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    dataset = Dataset.from_list([{"prompt": side_by_side.as_messages(r["prompt"])} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reward = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=1, dtype=torch.float32
    )
    reward.config.pad_token_id = tokenizer.pad_token_id
    config = RLOOConfig(
        output_dir=str(Path(args.work) / f"trl-{args.precision}"),
        per_device_train_batch_size=args.prompts * args.k,
        num_generations=args.k,
        max_completion_length=args.new_tokens,
        max_steps=args.steps,
        learning_rate=LEARNING_RATE,
        beta=KL_COEF,
        temperature=1.0,
        top_p=1.0,
        bf16=args.precision == "bf16",
        **side_by_side.TRL_CPU,
    )
    trainer = RLOOTrainer(
        model=policy,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        reward_processing_classes=tokenizer,
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    lengths = [
        r["completions/mean_length"]
        for r in trainer.state.log_history
        if "completions/mean_length" in r
    ]
    samples = args.prompts * args.k * args.steps
    return {
        "samples": samples,
        "samples_per_second": samples / seconds,
        "train_seconds": seconds,
        "mean_response_length": sum(lengths) / len(lengths) if lengths else None,
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "trl_version": trl.__version__,
    }


def _child(side: str, args: argparse.Namespace) -> dict:
    options = side_by_side.forwarded(
        args, "precision", "data", "work", "prompts", "k", "new_tokens", "steps"
    )
    return side_by_side.run_worker(__file__, "--worker", side, *options)


def bench(args: argparse.Namespace, work: Path) -> dict:
    """Both sides alternated for ``args.rounds`` rounds; the report."""
    args.work, args.data = str(work), str(work / "prompts.jsonl")
    n_prompts = side_by_side.write_prompts(Path(args.data), args.prompts * args.steps)
    return {
        "benchmark": "rloo_vs_trl",
        "model": "smollm2-135m-instruct",
        "prompts": n_prompts,
        "samples_per_prompt": args.k,
        "max_new_tokens": args.new_tokens,
        "precision": args.precision,
        **side_by_side.run_sides(args, lambda side: _child(side, args), rate="samples_per_second"),
        "load_average_at_end": os.getloadavg(),
    }


WORKERS = {"ours": run_ours, "trl": run_trl}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--k", type=int, default=4, help="samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2)
    args = side_by_side.parse_options(
        parser, precision="fp32", precisions=("fp32", "bf16"), rounds=2, workers=WORKERS
    )

    side_by_side.run_script(args, name="rloo", workers=WORKERS, bench=bench)


if __name__ == "__main__":
    main()

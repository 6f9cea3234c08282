"""Reward model on all-MiniLM-L6-v2: Concord's recipe against TRL's RewardTrainer, same model, data,
batch, length, learning rate and precision, in one run. Prints one JSON object.

Data: the demo comparisons with a majority judgement (``--pairs`` of them), as in
bench_dpo_vs_trl.py. Each side runs in its own subprocess for its own peak memory (ru_maxrss).
Ours reads ``[CLS] prompt [SEP] response [SEP]``; TRL reads prompt + response + EOS as one text (its
non-conversational format, EOS = [SEP]) and drops pairs longer than max_length, so the number of
pairs each trained is reported with the rates (the token counts are otherwise equal). Both train
one epoch without gradient checkpointing or dropout. The sides alternate for ``--rounds`` rounds and
each side's fastest round is reported.

    .venv/bin/python bench/bench_train_rm_vs_trl.py [--pairs 48] [--batch 8] [--max-length 512]
        [--precision fp32|bf16] [--rounds 3] [--skip-trl]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import side_by_side

LEARNING_RATE = 1e-5
MODEL = "all-minilm-l6-v2"


def run_ours(args: argparse.Namespace) -> dict:
    from training.recipes import RewardModelConfig, train_reward_model

    result = train_reward_model(
        RewardModelConfig(
            model=side_by_side.model_folder(MODEL),
            data=args.data,
            output_dir=str(Path(args.work) / f"ours-{args.precision}"),
            batch_size=args.batch,
            max_length=args.max_length,
            epochs=1,
            learning_rate=LEARNING_RATE,
            eval_fraction=0.0,
            bf16=args.precision == "bf16",
            checkpoint_every=0,
            resume=False,
            device="cpu",
        )
    )
    summary = result.summary
    return {
        "pairs": summary["pairs_trained"],
        "pairs_per_second": summary["pairs_per_second"],
        "tokens_per_second": summary["tokens_per_second"],
        "train_seconds": summary["train_seconds"],
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
    }


def _prompt_text(prompt: str | list[dict[str, str]]) -> str:
    """A conversation as plain text, as ours renders it for encoders (contents joined)."""
    return prompt if isinstance(prompt, str) else "\n\n".join(m["content"] for m in prompt)


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    model_dir = side_by_side.model_folder(MODEL)
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    dataset = Dataset.from_list(
        [
            {
                "prompt": _prompt_text(r["prompt"]) + "\n\n",
                "chosen": r["chosen"],
                "rejected": r["rejected"],
            }
            for r in rows
        ]
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=1, dtype=torch.float32
    )
    config = RewardConfig(
        output_dir=str(Path(args.work) / f"trl-{args.precision}"),
        per_device_train_batch_size=args.batch,
        max_length=args.max_length,
        num_train_epochs=1,
        learning_rate=LEARNING_RATE,
        bf16=args.precision == "bf16",
        **side_by_side.TRL_CPU,
        eos_token=tokenizer.sep_token,
    )
    trainer = RewardTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    trained = len(trainer.train_dataset)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    return {
        "pairs": trained,
        "pairs_per_second": trained / seconds,
        "train_seconds": seconds,
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "trl_version": trl.__version__,
    }


def _child(side: str, args: argparse.Namespace) -> dict:
    options = side_by_side.forwarded(args, "precision", "data", "work", "batch", "max_length")
    return side_by_side.run_worker(__file__, "--worker", side, *options)


def bench(args: argparse.Namespace, work: Path) -> dict:
    """Both sides alternated for ``args.rounds`` rounds; the report."""
    args.work, args.data = str(work), str(work / "pairs.jsonl")
    n_pairs = side_by_side.write_pairs(Path(args.data), args.pairs)
    return {
        "benchmark": "reward_model_vs_trl",
        "model": MODEL,
        "pairs": n_pairs,
        "batch_size": args.batch,
        "max_length": args.max_length,
        "precision": args.precision,
        **side_by_side.run_sides(args, lambda side: _child(side, args), rate="pairs_per_second"),
        "load_average_at_end": os.getloadavg(),
    }


WORKERS = {"ours": run_ours, "trl": run_trl}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    side_by_side.add_pair_options(parser, pairs=48, batch=8, max_length=512)
    args = side_by_side.parse_options(
        parser, precision="fp32", precisions=("fp32", "bf16"), rounds=3, workers=WORKERS
    )

    side_by_side.run_script(args, name="rm", workers=WORKERS, bench=bench)


if __name__ == "__main__":
    main()

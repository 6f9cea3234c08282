"""DPO on SmolLM2-135M-Instruct: Concord's recipe against TRL's DPOTrainer, same model, data, batch,
length, learning rate and precision, in one run. Prints one JSON object.

Data: the first ``--pairs`` demo comparisons with a majority judgement (demo/comparisons.jsonl),
chosen = the majority's response. Each side runs in its own subprocess (so peak memory is its own):

- ``ours``: ``train_dpo`` with a cold reference cache. ``pairs_per_second`` counts the reference pass
  and the training loop (model loading excluded); ``warm_pairs_per_second`` is a second run that finds
  the reference log-probabilities in the cache (what every later run on the same data sees).
- ``trl``: ``DPOTrainer`` with its defaults except gradient checkpointing off (ours is off too), no
  saving, no reporting; timed around ``trainer.train()``.

Both report the loss of their first step (ln 2 = 0.6931 when policy = reference) and the summed
log-probabilities of the first 8 pairs' chosen responses before training, so the numbers are shown
to be the same computation. Peak memory is the process's peak resident set (ru_maxrss). The sides
alternate for ``--rounds`` rounds and each side's fastest round is reported (all rounds are listed):
on a shared machine other work only ever slows a run down. Speed is never asserted in tests; it is
measured here.

    .venv/bin/python bench/bench_dpo_vs_trl.py [--pairs 32] [--batch 8] [--max-length 256]
        [--precision fp32|bf16|both] [--rounds 2] [--skip-trl]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import side_by_side

LEARNING_RATE = 5e-7
BETA = 0.1
CHECK_PAIRS = 8


def run_ours(args: argparse.Namespace) -> dict:
    import torch

    from training.recipes import DPOConfig, train_dpo
    from training.recipes.dpo import ReferenceLogps

    model = side_by_side.model_folder()
    work = Path(args.work)
    # A fresh cache per round: "cold" must compute the reference, "warm" then finds it.
    cache_dir = Path(tempfile.mkdtemp(prefix=f"ref-cache-{args.precision}-", dir=work))
    results = {}
    for attempt in ("cold", "warm"):
        config = DPOConfig(
            model=model,
            data=args.data,
            output_dir=str(cache_dir / f"ours-{attempt}"),
            batch_size=args.batch,
            max_length=args.max_length,
            epochs=1,
            learning_rate=LEARNING_RATE,
            beta=BETA,
            bf16=args.precision == "bf16",
            checkpoint_every=0,
            resume=False,
            device="cpu",
            reference_cache_dir=str(cache_dir),
        )
        result = train_dpo(config)
        metrics = [
            json.loads(line)
            for line in (Path(config.output_dir) / "metrics.jsonl").read_text().splitlines()
        ]
        results[attempt] = {**result.summary, "first_step_loss": metrics[0]["loss"]}
    cache = next(cache_dir.glob("*.pt"))
    reference = ReferenceLogps.load(cache, results["cold"]["pairs"])
    cold, warm = results["cold"], results["warm"]
    return {
        "pairs": cold["pairs_trained"],
        "pairs_per_second": cold["pairs_per_second"],
        "tokens_per_second": cold["tokens_per_second"],
        "reference_seconds": cold["reference_seconds"],
        "train_seconds": cold["train_seconds"],
        "warm_pairs_per_second": warm["pairs_per_second"],
        "warm_reference_seconds": warm["reference_seconds"],
        "first_step_loss": cold["first_step_loss"],
        "chosen_logps_first_pairs": reference.chosen[:CHECK_PAIRS].tolist() if reference else None,
        "packed": cold["packed"],
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "torch_threads": torch.get_num_threads(),
    }


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    model_dir = side_by_side.model_folder()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    dataset = Dataset.from_list(
        [
            {
                "prompt": side_by_side.as_messages(r["prompt"]),
                "chosen": [{"role": "assistant", "content": r["chosen"]}],
                "rejected": [{"role": "assistant", "content": r["rejected"]}],
            }
            for r in rows
        ]
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = DPOConfig(
        output_dir=str(Path(args.work) / f"trl-{args.precision}"),
        per_device_train_batch_size=args.batch,
        max_length=args.max_length,
        num_train_epochs=1,
        learning_rate=LEARNING_RATE,
        beta=BETA,
        bf16=args.precision == "bf16",
        **side_by_side.TRL_CPU,
    )
    trainer = DPOTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    check = trainer.data_collator([trainer.train_dataset[i] for i in range(CHECK_PAIRS)])
    with trainer.accelerator.autocast():
        chosen_logps, _ = trainer.compute_ref_log_probs(trainer.model, check)
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    return {
        "pairs": len(rows),
        "pairs_per_second": len(rows) / seconds,
        "train_seconds": seconds,
        "trl_train_runtime": output.metrics.get("train_runtime"),
        "first_step_loss": losses[0] if losses else None,
        "chosen_logps_first_pairs": chosen_logps.float().tolist(),
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def _child(side: str, precision: str, args: argparse.Namespace) -> dict:
    options = side_by_side.forwarded(args, "data", "work", "batch", "max_length")
    return side_by_side.run_worker(__file__, "--worker", side, "--precision", precision, *options)


def bench(args: argparse.Namespace, work: Path) -> dict:
    """Both sides at each precision, alternated for ``args.rounds`` rounds; the report."""
    args.work = str(work)
    args.data = str(work / "pairs.jsonl")
    n_pairs = side_by_side.write_pairs(Path(args.data), args.pairs)
    runs = side_by_side.precisions(args.precision)
    report: dict = {
        "benchmark": "dpo_vs_trl",
        "model": "smollm2-135m-instruct",
        "pairs": n_pairs,
        "batch_size": args.batch,
        "max_length": args.max_length,
        "learning_rate": LEARNING_RATE,
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
    }
    for precision in runs:
        report[precision] = side_by_side.run_sides(
            args,
            lambda side, precision=precision: _child(side, precision, args),
            rate="pairs_per_second",
            ratios={
                "speedup_cold_cache": "pairs_per_second",
                "speedup_warm_cache": ("warm_pairs_per_second", "pairs_per_second"),
                "peak_rss_ratio": "peak_rss_bytes",
            },
            differences={
                "first_step_loss_difference": "first_step_loss",
                "max_abs_logp_difference_first_pairs": "chosen_logps_first_pairs",
            },
        )
    if len(runs) == 2 and report["fp32"]["ours"] and report["bf16"]["ours"]:
        report["ours_bf16_over_fp32"] = (
            report["bf16"]["ours"]["pairs_per_second"] / report["fp32"]["ours"]["pairs_per_second"]
        )
    report["load_average_at_end"] = os.getloadavg()
    return report


WORKERS = {"ours": run_ours, "trl": run_trl}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    side_by_side.add_pair_options(parser, pairs=32, batch=8, max_length=256)
    args = side_by_side.parse_options(
        parser, precision="both", precisions=("fp32", "bf16", "both"), rounds=2, workers=WORKERS
    )

    side_by_side.run_script(args, name="dpo", workers=WORKERS, bench=bench)


if __name__ == "__main__":
    main()

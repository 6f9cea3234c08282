"""LoRA DPO against full DPO, both Concord's recipe, on SmolLM2-135M-Instruct: peak memory and pairs
per second, same data, batch, length, steps and precision. Prints JSON lines, then one JSON report.

Data: the first ``--pairs`` demo comparisons with a majority judgement (demo/comparisons.jsonl, as
``bench_dpo_vs_trl.py``), chosen = the majority's response. Each side runs in its own subprocess, so
its peak resident set (ru_maxrss, model loading included) is its own:

- ``full``: ``train_dpo`` training every weight (AdamW states for all 135M parameters);
- ``lora``: the same with ``lora_rank`` (default 16, alpha 32, every attention and MLP projection):
  only the adapters are trained, and the reference is the policy with its adapters off.

Both start from an empty reference cache (step 1 fills its own pairs, the later steps' pairs take a
reference pass, the same for both), so ``pairs_per_second`` counts reference pass and training, and
``train_pairs_per_second`` the training steps alone. The first step's loss is ln 2 on both sides
(policy = reference at step 1: a fresh adapter's B is 0). Sides alternate for ``--rounds`` rounds; each
side's fastest round is reported (other work on a shared machine only slows a run down). The
report gives the CPU's flags (AVX2, AVX-512 BF16, AMX), the precision and the load average.

    .venv/bin/python bench/bench_lora_dpo.py [--pairs 16] [--batch 4] [--micro-batch 1] [--steps 4]
        [--max-length 256] [--rank 16] [--precision fp32|bf16] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import side_by_side

os.environ.setdefault("HF_HUB_OFFLINE", "1")
FULL_LEARNING_RATE = 5e-7  # DPOConfig's default
LORA_LEARNING_RATE = (
    5e-5  # adapters start at B = 0 and take a larger step; speed does not depend on it
)


def run_side(args: argparse.Namespace) -> dict:
    """One side's run in this process: its summary's rates, memory and first loss."""
    import torch

    from training.recipes import DPOConfig, train_dpo

    lora = args.side == "lora"
    output = Path(tempfile.mkdtemp(prefix=f"lora-bench-{args.side}-", dir=args.work))
    config = DPOConfig(
        model=side_by_side.model_folder(),
        data=args.data,
        output_dir=str(output),
        batch_size=args.batch,
        micro_batch_size=args.micro_batch,
        max_steps=args.steps,
        max_length=args.max_length,
        learning_rate=LORA_LEARNING_RATE if lora else FULL_LEARNING_RATE,
        bf16=args.precision == "bf16",
        checkpoint_every=0,
        resume=False,
        device="cpu",
        reference_cache_dir=str(output / "cache"),
        lora_rank=args.rank if lora else 0,
    )
    result = train_dpo(config)
    first = json.loads((output / "metrics.jsonl").read_text().splitlines()[0])
    summary = result.summary
    trainable = summary.get("lora_trainable_parameters")
    return {
        "side": args.side,
        "lora_rank": config.lora_rank,
        "trainable_parameters": trainable,
        "pairs_trained": summary["pairs_trained"],
        "tokens_trained": summary["tokens_trained"],
        "pairs_per_second": summary["pairs_per_second"],
        "train_pairs_per_second": summary["train_pairs_per_second"],
        "train_seconds": summary["train_seconds"],
        "reference_seconds": summary["reference_seconds"],
        "first_step_loss": first["loss"],
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--micro-batch", type=int, help="pairs per forward (default: --batch)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--side", choices=("full", "lora"), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a child: one run, one JSON line
        print(json.dumps(run_side(args)))
        return

    work = Path(tempfile.mkdtemp(prefix="lora-bench-"))
    args.data, args.work = str(work / "pairs.jsonl"), str(work)
    n_pairs = side_by_side.write_pairs(Path(args.data), args.pairs)
    options = side_by_side.forwarded(
        args, "data", "work", "batch", "steps", "micro_batch", "max_length", "rank", "precision"
    )

    def run(side: str) -> dict:
        row = side_by_side.run_worker(__file__, "--side", side, *options, error_chars=4000)
        if "error" in row:
            sys.stderr.write(row["error"])
            raise SystemExit(f"{side} failed with exit status {row['exit_status']}")
        row["load_average"] = os.getloadavg()
        print(json.dumps(row), flush=True)
        return row

    rounds = side_by_side.alternate_rounds(run, rounds=args.rounds, sides=("full", "lora"))
    full, lora = (
        side_by_side.best_round(rounds[side], "pairs_per_second") for side in ("full", "lora")
    )
    ratios = side_by_side.compare(
        lora,
        full,
        ratios={
            "lora_over_full_pairs_per_second": "pairs_per_second",
            "lora_over_full_train_pairs_per_second": "train_pairs_per_second",
        },
    )
    report = {
        "model": "SmolLM2-135M-Instruct",
        "pairs_in_file": n_pairs,
        "batch": args.batch,
        "micro_batch": args.micro_batch or args.batch,
        "steps": args.steps,
        "max_length": args.max_length,
        "precision": args.precision,
        "cpu_flags": side_by_side.cpu_flags_present(),
        "load_average_at_end": os.getloadavg(),
        "full": full,
        "lora": lora,
        **ratios,
        "peak_rss_saved_bytes": full["peak_rss_bytes"] - lora["peak_rss_bytes"],
        "rounds": rounds,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

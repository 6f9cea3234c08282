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
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
FULL_LEARNING_RATE = 5e-7  # DPOConfig's default
LORA_LEARNING_RATE = (
    5e-5  # adapters start at B = 0 and take a larger step; speed does not depend on it
)


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    found = re.search(r"^flags\s*:(.*)$", text, re.M)
    flags = set(found.group(1).split()) if found else set()
    return sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma"})


def run_side(args: argparse.Namespace) -> dict:
    """One side's run in this process: its summary's rates, memory and first loss."""
    import torch
    from bench_dpo_vs_trl import _model_dir

    from training.recipes import DPOConfig, train_dpo

    lora = args.side == "lora"
    output = Path(tempfile.mkdtemp(prefix=f"lora-bench-{args.side}-", dir=args.work))
    config = DPOConfig(
        model=_model_dir(),
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
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
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

    from bench_dpo_vs_trl import write_pairs

    work = Path(tempfile.mkdtemp(prefix="lora-bench-"))
    data = work / "pairs.jsonl"
    n_pairs = write_pairs(data, args.pairs)
    rounds: dict[str, list[dict]] = {"full": [], "lora": []}
    for _ in range(args.rounds):
        for side in ("full", "lora"):
            command = [
                sys.executable, __file__, "--side", side, "--data", str(data), "--work", str(work),
                "--batch", str(args.batch), "--steps", str(args.steps),
                *(["--micro-batch", str(args.micro_batch)] if args.micro_batch else []),
                "--max-length", str(args.max_length), "--rank", str(args.rank),
                "--precision", args.precision,
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.stderr.write(done.stderr[-4000:])
                raise SystemExit(f"{side} failed with exit status {done.returncode}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["load_average"] = os.getloadavg()
            print(json.dumps(row), flush=True)
            rounds[side].append(row)
    best = {side: max(rows, key=lambda r: r["pairs_per_second"]) for side, rows in rounds.items()}
    full, lora = best["full"], best["lora"]
    report = {
        "model": "SmolLM2-135M-Instruct",
        "pairs_in_file": n_pairs,
        "batch": args.batch,
        "micro_batch": args.micro_batch or args.batch,
        "steps": args.steps,
        "max_length": args.max_length,
        "precision": args.precision,
        "cpu_flags": cpu_flags(),
        "load_average_at_end": os.getloadavg(),
        "full": full,
        "lora": lora,
        "lora_over_full_pairs_per_second": lora["pairs_per_second"] / full["pairs_per_second"],
        "lora_over_full_train_pairs_per_second": lora["train_pairs_per_second"]
        / full["train_pairs_per_second"],
        "peak_rss_saved_bytes": full["peak_rss_bytes"] - lora["peak_rss_bytes"],
        "rounds": rounds,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

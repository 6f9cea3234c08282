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
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
LEARNING_RATE = 5e-7
BETA = 0.1
CHECK_PAIRS = 8


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _model_dir() -> str:
    import django

    django.setup()
    from common.model_registry import model_path

    return str(model_path("smollm2-135m-instruct"))


def write_pairs(path: Path, n_pairs: int) -> int:
    """Demo comparisons with a majority judgement -> TRL-style rows; returns how many were written."""
    rows = []
    for line in (ROOT / "demo" / "comparisons.jsonl").read_text().splitlines():
        row = json.loads(line)
        votes = [j["choice"] for j in row.get("judgements", [])]
        a, b = votes.count("a"), votes.count("b")
        if a == b:
            continue
        chosen, rejected = (
            (row["response_a"], row["response_b"])
            if a > b
            else (row["response_b"], row["response_a"])
        )
        rows.append({"prompt": row["prompt"], "chosen": chosen, "rejected": rejected})
        if len(rows) == n_pairs:
            break
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def run_ours(args: argparse.Namespace) -> dict:
    import torch

    from training.recipes import DPOConfig, train_dpo
    from training.recipes.dpo import load_cached_reference

    model = _model_dir()
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
    reference = load_cached_reference(cache, results["cold"]["pairs"])
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
        "peak_rss_bytes": _peak_rss_bytes(),
        "torch_threads": torch.get_num_threads(),
    }


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer
    from trl_settings import TRL_CPU

    model_dir = _model_dir()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    dataset = Dataset.from_list(
        [
            {
                "prompt": as_messages(r["prompt"]),
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
        **TRL_CPU,
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
        "peak_rss_bytes": _peak_rss_bytes(),
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def run_worker(script: str, side: str, precision: str, *options: str) -> dict:
    """Run ``script --worker SIDE`` in its own process (so its peak memory is its own); returns the
    last JSON object it printed, or ``{"error": <end of its stderr>}``."""
    command = [sys.executable, script, "--worker", side, "--precision", precision, *options]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": done.stderr[-2000:]}
    return json.loads(lines[-1])


def as_messages(prompt: str | list[dict[str, str]]) -> list[dict[str, str]]:
    """A prompt as TRL's conversational format wants it: a text becomes one user message."""
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def _child(side: str, precision: str, args: argparse.Namespace) -> dict:
    return run_worker(
        __file__, side, precision, "--data", args.data, "--work", args.work,
        "--batch", str(args.batch), "--max-length", str(args.max_length),
    )  # fmt: skip


def _compare(ours: dict, trl: dict) -> dict:
    if not ours or not trl:
        return {}
    diffs = [
        abs(a - b)
        for a, b in zip(
            ours["chosen_logps_first_pairs"], trl["chosen_logps_first_pairs"], strict=True
        )
    ]
    return {
        "speedup_cold_cache": ours["pairs_per_second"] / trl["pairs_per_second"],
        "speedup_warm_cache": ours["warm_pairs_per_second"] / trl["pairs_per_second"],
        "peak_rss_ratio": ours["peak_rss_bytes"] / trl["peak_rss_bytes"],
        "first_step_loss_difference": abs(ours["first_step_loss"] - trl["first_step_loss"]),
        "max_abs_logp_difference_first_pairs": max(diffs),
    }


def _best(runs: list[dict]) -> dict:
    """The fastest of the rounds that succeeded (other users of a shared machine only slow a run
    down, so the fastest is the least disturbed)."""
    good = [r for r in runs if "error" not in r]
    return max(good, key=lambda r: r["pairs_per_second"]) if good else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--precision", choices=("fp32", "bf16", "both"), default="both")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work folder under var/")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating runs per side; best kept"
    )
    parser.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        result = run_ours(args) if args.worker == "ours" else run_trl(args)
        print(json.dumps(result))
        return

    work = Path(tempfile.mkdtemp(prefix="bench-dpo-", dir=ROOT / "var"))
    args.work = str(work)
    args.data = str(work / "pairs.jsonl")
    n_pairs = write_pairs(Path(args.data), args.pairs)
    precisions = ("fp32", "bf16") if args.precision == "both" else (args.precision,)
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
    for precision in precisions:
        rounds: dict[str, list[dict]] = {"ours": [], "trl": []}
        for _ in range(args.rounds):  # alternate, so slow spells of a shared machine hit both
            rounds["ours"].append(_child("ours", precision, args))
            if not args.skip_trl:
                rounds["trl"].append(_child("trl", precision, args))
        ours, trl = _best(rounds["ours"]), _best(rounds["trl"])
        report[precision] = {
            "ours": ours,
            "trl": trl,
            **_compare(ours, trl),
            "rounds": {
                side: [r.get("pairs_per_second", r.get("error", "")[-300:]) for r in runs]
                for side, runs in rounds.items()
            },
        }
    if len(precisions) == 2 and report["fp32"]["ours"] and report["bf16"]["ours"]:
        report["ours_bf16_over_fp32"] = (
            report["bf16"]["ours"]["pairs_per_second"] / report["fp32"]["ours"]["pairs_per_second"]
        )
    report["load_average_at_end"] = os.getloadavg()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)  # trained models: about 0.5 GB a run
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

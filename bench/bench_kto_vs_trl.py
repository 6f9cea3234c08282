"""KTO on SmolLM2-135M-Instruct: Concord's recipe against TRL's KTOTrainer, same model, examples,
batch, length, learning rate and precision, in one run. Prints one JSON object.

Data: the first ``--pairs`` demo comparisons with a majority judgement (demo/comparisons.jsonl), each
split into a desirable (the majority's response) and an undesirable example, written as TRL's
unpaired format {prompt, completion, label} in the order chosen 1, rejected 1, chosen 2, ... Both
sides read that file: ours with ``unpaired_data``, TRL as a conversational dataset. Each side runs in
its own subprocess (so peak memory is its own):

- ``ours``: ``train_kto`` with a cold reference cache. ``examples_per_second`` counts the reference
  pass and the training loop (model loading excluded); ``warm_examples_per_second`` is a second run
  that finds the reference log-probabilities in the cache.
- ``trl``: ``KTOTrainer`` with its defaults (a reference model beside the policy, reference and KL
  log-probs every step, sequential sampling) except gradient checkpointing off (ours is off too), no
  saving, no reporting; timed around ``trainer.train()``.

Both use weights 1.0 / 1.0 (split pairs are balanced), beta 0.1, one epoch. Both report the loss of
their first step (1/2 when policy = reference), the summed log-probabilities of the first 8 examples'
completions before training, and the tokens trained (prompt + completion of every example; TRL's
``num_tokens``), so the numbers are shown to be the same computation. TRL batches in file order and
ours in a seeded shuffle: the same examples and batch size, not the same groupings. Peak memory is the
process's peak resident set. The sides alternate for ``--rounds`` rounds and each side's fastest
round is reported (all are listed). The CPU's flags (AVX2, AVX-512 BF16, AMX) and the load average
at the start and end are printed with the figures.

On a shared machine wall time measures the neighbours as much as the work, so each side also
reports the CPU seconds its process spent in the timed part (``time.process_time``: ours from the
start of the reference pass, or of the first step when the cache is warm, to the end of the last step;
TRL's around ``trainer.train()``) and ``examples_per_cpu_second``. With ``--threads 1`` (the
default) that is a count of the work done, undisturbed by waiting for a core or by threads spinning
at a barrier.

    .venv/bin/python bench/bench_kto_vs_trl.py [--pairs 16] [--batch 8] [--max-length 512]
        [--precision fp32|bf16|both] [--rounds 2] [--threads 1] [--skip-trl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench_dpo_vs_trl import _model_dir, _peak_rss_bytes, as_messages, run_worker, write_pairs

ROOT = Path(__file__).resolve().parent.parent
LEARNING_RATE = 5e-7
BETA = 0.1
CHECK_EXAMPLES = 8
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags() -> dict[str, bool]:
    """Which of CPU_FLAGS /proc/cpuinfo lists (all False where it cannot be read)."""
    try:
        words = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        words = set()
    return {flag: flag in words for flag in CPU_FLAGS}


def write_unpaired(pairs_path: Path, path: Path) -> int:
    """Each pair of ``pairs_path`` -> its chosen (label true) then its rejected (label false)."""
    rows = []
    for line in pairs_path.read_text().splitlines():
        pair = json.loads(line)
        rows.append({"prompt": pair["prompt"], "completion": pair["chosen"], "label": True})
        rows.append({"prompt": pair["prompt"], "completion": pair["rejected"], "label": False})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def run_ours(args: argparse.Namespace) -> dict:
    import torch

    from training.recipes import KTOConfig, TrainingCallback, train_kto
    from training.recipes.kto_data import KTOReference

    torch.set_num_threads(args.threads)

    class CpuClock(TrainingCallback):
        """CPU seconds from the reference pass (or the first step) to the end of the last step
        (saving the final model left out, as TRL saves nothing)."""

        def __init__(self) -> None:
            self.start: float | None = None
            self.seconds = 0.0

        def on_phase(self, *, phase: str, done: int, total: int) -> None:
            if self.start is None:
                self.start = time.process_time()

        def on_start(self, *, total_steps: int, config: dict) -> None:
            if self.start is None:
                self.start = time.process_time()

        def on_step(self, *, step: int, total_steps: int) -> None:  # the last one is kept
            self.seconds = time.process_time() - (self.start or 0.0)

    model = _model_dir()
    cache_dir = Path(tempfile.mkdtemp(prefix=f"kto-cache-{args.precision}-", dir=args.work))
    results = {}
    for attempt in ("cold", "warm"):
        config = KTOConfig(
            model=model,
            data=args.data,
            unpaired_data=args.data,
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
        clock = CpuClock()
        result = train_kto(config, clock)
        lines = (Path(config.output_dir) / "metrics.jsonl").read_text().splitlines()
        results[attempt] = {
            **result.summary,
            "first_step_loss": json.loads(lines[0])["loss"],
            "cpu_seconds": clock.seconds,
        }
    cold, warm = results["cold"], results["warm"]
    reference = KTOReference.load(next(cache_dir.glob("*.pt")), cold["examples"])
    return {
        "examples": cold["examples_trained"],
        "examples_per_second": cold["examples_per_second"],
        "tokens_trained": cold["tokens_trained"],
        "examples_truncated": cold["examples_truncated"],
        "reference_seconds": cold["reference_seconds"],
        "train_seconds": cold["train_seconds"],
        "warm_examples_per_second": warm["examples_per_second"],
        "cpu_seconds": cold["cpu_seconds"],
        "examples_per_cpu_second": cold["examples_trained"] / cold["cpu_seconds"],
        "warm_cpu_seconds": warm["cpu_seconds"],
        "warm_examples_per_cpu_second": warm["examples_trained"] / warm["cpu_seconds"],
        "first_step_loss": cold["first_step_loss"],
        "logps_first_examples": reference.examples[:CHECK_EXAMPLES].tolist() if reference else None,
        "packed": cold["packed"],
        "peak_rss_bytes": _peak_rss_bytes(),
        "torch_threads": torch.get_num_threads(),
    }


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import KTOConfig, KTOTrainer
    from trl_settings import TRL_CPU

    torch.set_num_threads(args.threads)
    model_dir = _model_dir()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    dataset = Dataset.from_list(
        [
            {
                "prompt": as_messages(r["prompt"]),
                "completion": [{"role": "assistant", "content": r["completion"]}],
                "label": r["label"],
            }
            for r in rows
        ]
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = KTOConfig(
        output_dir=str(Path(args.work) / f"trl-{args.precision}"),
        per_device_train_batch_size=args.batch,
        max_length=args.max_length,
        num_train_epochs=1,
        learning_rate=LEARNING_RATE,
        beta=BETA,
        desirable_weight=1.0,
        undesirable_weight=1.0,
        bf16=args.precision == "bf16",
        **TRL_CPU,
    )
    trainer = KTOTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    check = trainer.data_collator([trainer.train_dataset[i] for i in range(CHECK_EXAMPLES)])
    logps, _ = trainer.compute_ref_log_probs(trainer.model, check)
    start, cpu_start = time.perf_counter(), time.process_time()
    output = trainer.train()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    logged = [row for row in trainer.state.log_history if "loss" in row]
    return {
        "examples": len(rows),
        "examples_per_second": len(rows) / seconds,
        "train_seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "examples_per_cpu_second": len(rows) / cpu_seconds,
        "trl_train_runtime": output.metrics.get("train_runtime"),
        "first_step_loss": logged[0]["loss"] if logged else None,
        "tokens_trained": logged[-1].get("num_tokens") if logged else None,
        "logps_first_examples": logps.float().tolist(),
        "peak_rss_bytes": _peak_rss_bytes(),
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def _child(side: str, precision: str, args: argparse.Namespace) -> dict:
    return run_worker(
        __file__, side, precision, "--data", args.data, "--work", args.work,
        "--batch", str(args.batch), "--max-length", str(args.max_length),
        "--threads", str(args.threads),
    )  # fmt: skip


def _compare(ours: dict, trl: dict) -> dict:
    if not ours or not trl:
        return {}
    diffs = [
        abs(a - b)
        for a, b in zip(ours["logps_first_examples"], trl["logps_first_examples"], strict=True)
    ]
    return {
        "speedup_cold_cache": ours["examples_per_second"] / trl["examples_per_second"],
        "speedup_warm_cache": ours["warm_examples_per_second"] / trl["examples_per_second"],
        "cpu_speedup_cold_cache": ours["examples_per_cpu_second"] / trl["examples_per_cpu_second"],
        "cpu_speedup_warm_cache": (
            ours["warm_examples_per_cpu_second"] / trl["examples_per_cpu_second"]
        ),
        "peak_rss_ratio": ours["peak_rss_bytes"] / trl["peak_rss_bytes"],
        "first_step_loss_difference": abs(ours["first_step_loss"] - trl["first_step_loss"]),
        "max_abs_logp_difference_first_examples": max(diffs),
        "same_tokens_trained": ours["tokens_trained"] == trl["tokens_trained"],
    }


def _best(runs: list[dict]) -> dict:
    """The round that did its work in the fewest CPU seconds, of those that succeeded."""
    good = [r for r in runs if "error" not in r]
    return max(good, key=lambda r: r["examples_per_cpu_second"]) if good else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--precision", choices=("fp32", "bf16", "both"), default="both")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work folder under var/")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per side")
    parser.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        result = run_ours(args) if args.worker == "ours" else run_trl(args)
        print(json.dumps(result))
        return

    work = Path(tempfile.mkdtemp(prefix="bench-kto-", dir=ROOT / "var"))
    args.work = str(work)
    n_pairs = write_pairs(work / "pairs.jsonl", args.pairs)
    args.data = str(work / "unpaired.jsonl")
    n_examples = write_unpaired(work / "pairs.jsonl", Path(args.data))
    precisions = ("fp32", "bf16") if args.precision == "both" else (args.precision,)
    report: dict = {
        "benchmark": "kto_vs_trl",
        "model": "smollm2-135m-instruct",
        "pairs": n_pairs,
        "examples": n_examples,
        "batch_size": args.batch,
        "max_length": args.max_length,
        "learning_rate": LEARNING_RATE,
        "cpu_count": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "torch_threads": args.threads,
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
                side: [r.get("examples_per_second", r.get("error", "")[-300:]) for r in runs]
                for side, runs in rounds.items()
            },
            "load_average_after": os.getloadavg(),
        }
    report["load_average_at_end"] = os.getloadavg()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

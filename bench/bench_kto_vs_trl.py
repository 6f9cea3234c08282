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
import tempfile
import time
from pathlib import Path

import side_by_side

LEARNING_RATE = 5e-7
BETA = 0.1
CHECK_EXAMPLES = 8


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

    model = side_by_side.model_folder()
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
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "torch_threads": torch.get_num_threads(),
    }


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    torch.set_num_threads(args.threads)
    model_dir = side_by_side.model_folder()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    dataset = Dataset.from_list(
        [
            {
                "prompt": side_by_side.as_messages(r["prompt"]),
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
        **side_by_side.TRL_CPU,
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
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def _child(side: str, precision: str, args: argparse.Namespace) -> dict:
    options = side_by_side.forwarded(args, "data", "work", "batch", "max_length", "threads")
    return side_by_side.run_worker(__file__, "--worker", side, "--precision", precision, *options)


def bench(args: argparse.Namespace, work: Path) -> dict:
    """Both sides at each precision, alternated for ``args.rounds`` rounds; the report."""
    args.work = str(work)
    n_pairs = side_by_side.write_pairs(work / "pairs.jsonl", args.pairs)
    args.data = str(work / "unpaired.jsonl")
    n_examples = write_unpaired(work / "pairs.jsonl", Path(args.data))
    runs = side_by_side.precisions(args.precision)
    report: dict = {
        "benchmark": "kto_vs_trl",
        "model": "smollm2-135m-instruct",
        "pairs": n_pairs,
        "examples": n_examples,
        "batch_size": args.batch,
        "max_length": args.max_length,
        "learning_rate": LEARNING_RATE,
        "cpu_count": os.cpu_count(),
        "cpu_flags": side_by_side.cpu_flags(),
        "torch_threads": args.threads,
        "load_average_at_start": os.getloadavg(),
    }
    for precision in runs:
        report[precision] = {
            **side_by_side.run_sides(
                args,
                lambda side, precision=precision: _child(side, precision, args),
                rate="examples_per_second",
                best_by="examples_per_cpu_second",  # the fewest CPU seconds for the work
                ratios={
                    "speedup_cold_cache": "examples_per_second",
                    "speedup_warm_cache": ("warm_examples_per_second", "examples_per_second"),
                    "cpu_speedup_cold_cache": "examples_per_cpu_second",
                    "cpu_speedup_warm_cache": (
                        "warm_examples_per_cpu_second",
                        "examples_per_cpu_second",
                    ),
                    "peak_rss_ratio": "peak_rss_bytes",
                },
                differences={
                    "first_step_loss_difference": "first_step_loss",
                    "max_abs_logp_difference_first_examples": "logps_first_examples",
                },
                same={"same_tokens_trained": "tokens_trained"},
            ),
            "load_average_after": os.getloadavg(),
        }
    report["load_average_at_end"] = os.getloadavg()
    return report


WORKERS = {"ours": run_ours, "trl": run_trl}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    side_by_side.add_pair_options(parser, pairs=16, batch=8, max_length=512)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per side")
    args = side_by_side.parse_options(
        parser, precision="both", precisions=("fp32", "bf16", "both"), rounds=2, workers=WORKERS
    )

    side_by_side.run_script(args, name="kto", workers=WORKERS, bench=bench)


if __name__ == "__main__":
    main()

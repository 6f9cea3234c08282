"""Model judges measured like annotators on the MT-Bench expert votes (Zheng et al., NeurIPS 2023):
a reward model trained on the votes of some questions and the local SmolLM2 judge, both judged
against the experts' votes on the other questions and printed by ``manage.py judge_report``.

The votes (../shared/data/mt_bench_human_judgments_turn1.jsonl, never copied here): 80 questions
(81-160), 6 models, 65 expert judges, 1,689 turn-1 votes. The first ``--heldout-questions`` questions
go to project ``mt-bench-heldout``, the rest to ``mt-bench-train`` (split by question, so no prompt is
in both). Each (question, unordered model pair) is one comparison, its judges' votes its judgements
(``annotation.formats.mt_bench``).

The votes carry no text: the questions and the six models' answers come from FastChat's layout,
``--questions question.jsonl --answers model_answer/`` (FastChat's ``llm_judge/data/mt_bench``,
after its ``download_mt_bench_pregenerated.py``). Without them only the experts' agreement among
themselves on the held-out questions (the yardstick for a judge's figures) is printed, and the JSON
says why the judges were not run. With them the pipeline is ``bench/judge_common.py``'s (shared with
``bench/judge_pandalm.py``). Run in a database of your own (created empty beforehand), e.g.:
  createdb -h 127.0.0.1 -U postgres concord_mt_bench
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_mt_bench HF_HUB_OFFLINE=1 \\
    .venv/bin/python bench/judge_mt_bench.py --heldout-questions 10 \\
    --questions fastchat/question.jsonl --answers fastchat/model_answer
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from judge_common import DATA, ROOT, django_ready, judge_arguments, manage, measure_judges

VOTES = DATA / "mt_bench_human_judgments_turn1.jsonl"


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


def _import(votes: list[dict[str, Any]], slug: str, args: argparse.Namespace, folder: Path) -> None:
    path = folder / f"{slug}.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in votes), encoding="utf-8")
    manage("import_comparisons", str(path), "--format", "mt-bench", "--questions",
           str(args.questions), "--answers", str(args.answers), "--project", slug)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout-questions", type=int, default=10, help="questions judged")
    parser.add_argument("--questions", type=Path, help="FastChat's mt_bench/question.jsonl")
    parser.add_argument("--answers", type=Path, help="FastChat's mt_bench/model_answer/ folder")
    judge_arguments(parser)
    args = parser.parse_args()
    if not VOTES.is_file():
        raise SystemExit(f"{VOTES.name} is not in {VOTES.parent} (set CONCORD_SHARED_DATA)")
    heldout, train = split_by_question(read_votes(), args.heldout_questions)
    result: dict[str, Any] = {
        "heldout_questions": args.heldout_questions,
        "heldout_votes": len(heldout),
        "train_votes": len(train),
        "experts_on_heldout": expert_agreement(heldout),
    }
    missing = [
        n for n, p in (("--questions", args.questions), ("--answers", args.answers)) if not p
    ]
    if missing:
        result["judges"] = (
            f"not run: the votes carry no text; give {' and '.join(missing)} (FastChat's "
            "llm_judge/data/mt_bench question.jsonl and model_answer/) to import the pairs"
        )
        print(json.dumps(result, indent=1))
        return
    django_ready()
    with tempfile.TemporaryDirectory() as folder:
        _import(heldout, "mt-bench-heldout", args, Path(folder))
        _import(train, "mt-bench-train", args, Path(folder))
    measured = measure_judges(heldout="mt-bench-heldout", train="mt-bench-train",
                              prefix="mt-bench", args=args)  # fmt: skip
    print(json.dumps({**result, **measured}, indent=1))


if __name__ == "__main__":
    main()

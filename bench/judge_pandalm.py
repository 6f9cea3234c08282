"""Model judges measured like annotators on PandaLM's test set (Wang et al., ICLR 2024): a reward
model trained on part of the pairs and the local SmolLM2 judge, both judged against the 3 human
labels of the held-out pairs and printed by ``manage.py judge_report``.

PandaLM's test set (../shared/data, never copied here): 999 pairs, 3 annotators each. Pairs
[0, heldout) go to project ``pandalm-heldout``; the next ``train`` pairs to ``pandalm-train``, whose
majority labels train a Bradley-Terry reward model (``--rm-base``: MiniLM-L6 by default, cheap on
CPU; or SmolLM2-135M) in this process, on CPU or GPU.
Meanwhile ``manage.py judge_run`` runs the SmolLM2 judge (default judging prompt, greedy,
``--max-new-tokens``), then the reward-model judge, on every held-out pair in both orders; ``manage.py
judge_report --json`` prints each judge's figures. Prints one JSON object with both reports.

The pipeline after the import is ``bench/judge_common.py``'s (shared with the MT-Bench bench).
Run in a database of your own (created empty beforehand; migrated here), e.g.:
  createdb -h 127.0.0.1 -U postgres concord_judge_bench
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_judge_bench HF_HUB_OFFLINE=1 \
    .venv/bin/python bench/judge_pandalm.py --heldout 60 --train 150
"""

from __future__ import annotations

import argparse
import csv
import json

from judge_common import DATA, django_ready, judge_arguments, measure_judges

CHOICE = {"0": "tie", "1": "a", "2": "b"}  # PandaLM's label -> Concord's choice


def pandalm_rows(start: int, stop: int) -> list[str]:
    """Pairs [start, stop) as Concord JSONL lines with the 3 annotators' judgements."""
    items = json.loads((DATA / "pandalm_testset-v1.json").read_text(encoding="utf-8"))
    with (DATA / "pandalm_testset_labels.csv").open(encoding="utf-8") as handle:
        labels = list(csv.DictReader(handle))
    lines = []
    for item, label in zip(items[start:stop], labels[start:stop], strict=True):
        prompt = item["instruction"] + (f"\n\n{item['input']}" if item.get("input") else "")
        lines.append(json.dumps({
            "prompt": prompt, "response_a": str(item["response1"]),
            "response_b": str(item["response2"]), "id": f"pandalm-{item['idx']}",
            "model_a": label["cmp_key"].split("_")[0], "model_b": label["cmp_key"].split("_")[1],
            "judgements": [
                {"annotator": f"pandalm-annotator{k}", "choice": CHOICE[label[f"annotator{k}"]]}
                for k in (1, 2, 3)
            ],
        }))  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", type=int, default=100, help="held-out pairs judged")
    parser.add_argument("--train", type=int, default=300, help="pairs the reward model learns")
    judge_arguments(parser)
    args = parser.parse_args()
    django_ready()
    from annotation.services.importing import comparisons_import, project_get_or_create

    heldout, _ = project_get_or_create(slug="pandalm-heldout", overlap=3)
    train, _ = project_get_or_create(slug="pandalm-train", overlap=3)
    comparisons_import(project=heldout, lines=pandalm_rows(0, args.heldout))
    comparisons_import(project=train, lines=pandalm_rows(args.heldout, args.heldout + args.train))
    result = measure_judges(heldout=heldout.slug, train=train.slug, prefix="pandalm", args=args)
    print(json.dumps({"heldout": args.heldout, "train": args.train, **result}, indent=1))


if __name__ == "__main__":
    main()

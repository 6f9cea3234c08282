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

Run in a database of your own (created empty beforehand; migrated here), e.g.:
  createdb -h 127.0.0.1 -U postgres concord_judge_bench
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_judge_bench HF_HUB_OFFLINE=1 \
    .venv/bin/python bench/judge_pandalm.py --heldout 60 --train 150
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("CONCORD_SHARED_DATA", ROOT.parent / "shared" / "data"))
CHOICE = {"0": "tie", "1": "a", "2": "b"}  # PandaLM's label -> Concord's choice


def manage(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return out.stdout


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
    parser.add_argument("--max-new-tokens", type=int, default=48, help="SmolLM2 judge's answers")
    parser.add_argument("--skip-llm", action="store_true", help="the reward-model judge only")
    parser.add_argument(
        "--template",
        help="judging prompt file for SmolLM2 (e.g. bench/judge_template_short.txt: one verdict "
        "line, which a 135M model follows more often than the default's reasoning first)",
    )
    parser.add_argument(
        "--rm-base", default="all-minilm-l6-v2", help="registry model the reward model starts from"
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    manage("migrate", "--noinput")
    import django

    django.setup()
    from annotation.services.exporting import dataset_export
    from annotation.services.importing import comparisons_import, project_get_or_create
    from training import services
    from training.models import TrainingRun
    from training.tasks import run_training_task

    heldout, _ = project_get_or_create(slug="pandalm-heldout", overlap=3)
    train, _ = project_get_or_create(slug="pandalm-train", overlap=3)
    comparisons_import(project=heldout, lines=pandalm_rows(0, args.heldout))
    comparisons_import(project=train, lines=pandalm_rows(args.heldout, args.heldout + args.train))
    timings = {}
    began = time.perf_counter()
    llm = None  # the SmolLM2 judge generates while the reward model trains (both take minutes)
    if not args.skip_llm:
        llm = subprocess.Popen(
            [sys.executable, "manage.py", "judge_run", "--project", "pandalm-heldout", "--judge",
             "pandalm-smollm2", "--model", "smollm2-135m-instruct", "--max-new-tokens",
             str(args.max_new_tokens), *(["--template", args.template] if args.template else [])],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
    run = services.run_create(
        name=f"pandalm rm on {args.train} pairs", kind="rm", base_model=args.rm_base,
        snapshot=services.snapshot_for(export=dataset_export(project=train)),
        config={"epochs": 1, "batch_size": 8, "max_length": 256, "learning_rate": 2e-5},
    )  # fmt: skip
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.QUEUED)
    run_training_task(run.pk)  # in this process
    run.refresh_from_db()
    if run.status != TrainingRun.Status.SUCCEEDED:
        raise SystemExit(f"reward model training {run.status}: {run.error[-2000:]}")
    timings["rm_train_s"] = round(time.perf_counter() - began, 1)
    manage("judge_run", "--project", "pandalm-heldout", "--judge", "pandalm-rm",
           "--reward-run", str(run.pk))  # fmt: skip
    timings["rm_train_and_judge_s"] = round(time.perf_counter() - began, 1)
    judges = ["pandalm-rm"]
    if llm is not None:
        print(llm.communicate()[0], file=sys.stderr)
        timings["smollm2_judge_s"] = round(time.perf_counter() - began, 1)
        judges.append("pandalm-smollm2")
    reports = {}
    for name in judges:
        report = ("judge_report", "--project", "pandalm-heldout", "--judge", name)
        reports[name] = json.loads(manage(*report, "--json"))
        print(manage(*report), file=sys.stderr)
    print(json.dumps({"heldout": args.heldout, "train": args.train, "timings": timings,
                      "reports": reports}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()

"""What the judge benches share (``judge_pandalm.py``, ``judge_mt_bench.py``): with a held-out
project and a training project already imported (people's labels as judgements), train a reward
model on the training project's majority labels in this process while ``manage.py judge_run`` runs
the SmolLM2 judge on every held-out pair in both orders, then judge the held-out pairs with the
reward model, and read each judge's figures back from ``manage.py judge_report --json``.

Run in a database of your own (created empty beforehand; ``django_ready`` migrates it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("CONCORD_SHARED_DATA", ROOT.parent / "shared" / "data"))


def manage(*args: str) -> str:
    """``manage.py ARGS`` in a child process; its stdout (raises on a non-zero exit)."""
    out = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return out.stdout


def judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every judge bench takes: the SmolLM2 judge's and the reward model's."""
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


def django_ready() -> None:
    """Migrate the database DATABASE_URL names, then set Django up in this process."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    manage("migrate", "--noinput")
    import django

    django.setup()


def measure_judges(
    *, heldout: str, train: str, prefix: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Train the reward model on project ``train`` and run it and (unless ``args.skip_llm``) the
    SmolLM2 judge on project ``heldout``; judges are named ``<prefix>-rm`` and
    ``<prefix>-smollm2``. Returns {"timings": {...}, "reports": {judge: judge_report JSON}}; the
    plain-text reports go to stderr."""
    from annotation.models import Project
    from annotation.services.exporting import dataset_export
    from training import services
    from training.models import TrainingRun
    from training.tasks import run_training_task

    timings = {}
    began = time.perf_counter()
    llm = None  # the SmolLM2 judge generates while the reward model trains (both take minutes)
    if not args.skip_llm:
        llm = subprocess.Popen(
            [sys.executable, "manage.py", "judge_run", "--project", heldout, "--judge",
             f"{prefix}-smollm2", "--model", "smollm2-135m-instruct", "--max-new-tokens",
             str(args.max_new_tokens), *(["--template", args.template] if args.template else [])],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
    export = dataset_export(project=Project.objects.get(slug=train))
    run = services.run_create(
        name=f"{prefix} rm on {export.n_pairs} pairs", kind="rm", base_model=args.rm_base,
        snapshot=services.snapshot_for(export=export),
        config={"epochs": 1, "batch_size": 8, "max_length": 256, "learning_rate": 2e-5},
    )  # fmt: skip
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.QUEUED)
    run_training_task(run.pk)  # in this process
    run.refresh_from_db()
    if run.status != TrainingRun.Status.SUCCEEDED:
        raise SystemExit(f"reward model training {run.status}: {run.error[-2000:]}")
    timings["rm_train_s"] = round(time.perf_counter() - began, 1)
    manage(
        "judge_run", "--project", heldout, "--judge", f"{prefix}-rm", "--reward-run", str(run.pk)
    )
    timings["rm_train_and_judge_s"] = round(time.perf_counter() - began, 1)
    judges = [f"{prefix}-rm"]
    if llm is not None:
        print(llm.communicate()[0], file=sys.stderr)
        timings["smollm2_judge_s"] = round(time.perf_counter() - began, 1)
        # judge_run exits non-zero when the judge did not succeed; its report still shows the
        # answers it saved, so say so beside the figures rather than passing it off as complete
        timings["smollm2_exit_code"] = llm.returncode
        judges.append(f"{prefix}-smollm2")
    reports = {}
    for name in judges:
        report = ("judge_report", "--project", heldout, "--judge", name)
        reports[name] = json.loads(manage(*report, "--json"))
        print(manage(*report), file=sys.stderr)
    return {"train_pairs": export.n_pairs, "timings": timings, "reports": reports}

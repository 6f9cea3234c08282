"""A small judged world, built here from configs: a tiny byte-level BPE tokenizer with a ChatML
template, a tiny Llama registered as the generative judge model, a tiny reward model as the final
folder of a succeeded reward-model run, and a project of 6 pairs labelled by three people; a
reward-model judge of it, judge answers written by hand, a scripted endpoint judge (``prefers_a``)
and Celery worker subprocesses on queues of a test's own (``gpu_worker``, ``default_worker``).
The fixtures reach tests/judges through its conftest.py; other folders import them by name."""

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection

from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from monitoring.models import JudgeOutput
from monitoring.services.judges import judge_create
from tests.helpers.fake_chat_server import Reply, completion
from tests.helpers.tiny_models import chatml_tokenizer, tiny_llama
from training.models import TrainingRun
from training.services import snapshot_for

JUDGE_MODEL = "smollm2-135m-instruct"  # the registry name the tiny judge model is saved under
# prompt, response a, response b, the three people's choices (a, b, tie)
ROWS = [
    ("What is 2 + 2?", "4.", "2 + 2 is 22.", "aaa"),
    ("Capital of Italy?", "Rome.", "Milan is the capital.", "aab"),
    ("A synonym for quick?", "Fast.", "Slow.", "aaa"),
    ("Boiling point of water at sea level?", "100 degrees Celsius.", "50 C.", "abt"),
    ("How many days in a week?", "Five.", "Seven days.", "bbb"),
    ("Colour of the sky on a clear day?", "Blue.", "Green, mostly.", "aat"),
]


@pytest.fixture(scope="session")
def judge_tokenizer_dir(tmp_path_factory) -> Path:
    """A ~300-token byte-level BPE tokenizer trained on the rows, <|im_end|> as EOS and pad."""
    corpus = [text for row in ROWS for text in row[:3]] * 4 + ["Response A B [[A]] [[B]] [[C]]"]
    return chatml_tokenizer(tmp_path_factory.mktemp("judge-tokenizer"), corpus, vocab_size=300)


def save_tiny_llama(folder: Path, tokenizer_dir: Path, *, classifier: bool, seed: int) -> Path:
    """A 2-layer Llama (hidden 32) saved with the tokenizer: a causal LM, or a 1-label sequence
    classifier (a reward model); 1024 positions."""
    return tiny_llama(
        folder, tokenizer_dir, seed=seed, for_classification=classifier, max_positions=1024
    )


@pytest.fixture
def judge_models(tmp_path, judge_tokenizer_dir, settings):
    """The tiny causal LM under the registry's SmolLM2 name (CONCORD_MODELS_DIR in tmp)."""
    settings.CONCORD_MODELS_DIR = tmp_path / "models"
    save_tiny_llama(
        tmp_path / "models" / JUDGE_MODEL, judge_tokenizer_dir, classifier=False, seed=0
    )
    return tmp_path / "models"


def rows_jsonl(rows=ROWS) -> list[str]:
    """The rows as Concord JSONL, judged by ann1..ann3."""
    return [
        json.dumps({
            "prompt": prompt, "response_a": a, "response_b": b, "id": f"pair-{k}",
            "judgements": [
                {"annotator": f"ann{r + 1}", "choice": {"t": "tie"}.get(c, c)}
                for r, c in enumerate(choices)
            ],
        })
        for k, (prompt, a, b, choices) in enumerate(rows)
    ]  # fmt: skip


@pytest.fixture
def judged_project(db, tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    project, _ = project_get_or_create(slug="judged", overlap=3)
    comparisons_import(project=project, lines=rows_jsonl())
    return project


@pytest.fixture
def reward_run(judged_project, tmp_path, judge_tokenizer_dir, settings):
    """A succeeded reward-model run of the project whose final folder holds a tiny reward model."""
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    output = tmp_path / "runs" / "rm"
    save_tiny_llama(output / "final", judge_tokenizer_dir, classifier=True, seed=1)
    return TrainingRun.objects.create(
        name="tiny rm", kind="rm", base_model=JUDGE_MODEL, status="succeeded",
        snapshot=snapshot_for(export=dataset_export(project=judged_project)), config={},
        output_dir=str(output),
    )  # fmt: skip


def reward_model_judge(project, run, **kwargs):
    return judge_create(
        project=project, name="rm", kind="reward_model", created_by=None, reward_run=run, **kwargs
    )


def judge_outputs_by_hand(judge, verdicts):
    """JudgeOutput rows by hand: verdicts[k] = (verdict with A first, with B first), "" unparsed."""
    comparisons = list(judge.project.comparisons.order_by("pk"))
    for comparison, pair in zip(comparisons, verdicts, strict=False):
        for first, verdict in zip("ab", pair, strict=True):
            JudgeOutput.objects.create(
                judge=judge, comparison=comparison, shown_first=first, raw=verdict or "?",
                verdict=verdict, parse_error="" if verdict else "no verdict found", seconds=0.25,
            )  # fmt: skip
    return comparisons


GOOD = {a for _, a, _, _ in ROWS}  # the fake judge prefers each pair's stored response a

UNDECIDED = ROWS[2][1]  # ... but cannot decide when "Fast." is shown first


def _shown_first(body: dict) -> str:
    text = body["messages"][-1]["content"]
    return re.search(r"\[Response A\]\n(.*?)\n\n\[Response B\]", text, re.S).group(1)


def prefers_a(body: dict, headers: dict) -> Reply:
    """[[A]] when the response shown first is a pair's stored a, else [[B]]; prose with no
    verdict when "Fast." is shown first."""
    first = _shown_first(body)
    if first == UNDECIDED:
        return completion("Both are fine, I think.")
    return completion("Reasoning... [[A]]" if first in GOOD else "Reasoning... [[B]]")


ROOT = Path(__file__).resolve().parents[2]  # the project folder


def _worker(settings, tmp_path, queue: str):
    """A worker subprocess on ``queue``: one process, a fresh child per task; stopped at the end."""
    if connection.vendor != "postgresql" or not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("needs PostgreSQL and Redis (make test sets them)")
    db = connection.settings_dict
    env = {
        **os.environ,
        "CONCORD_GPU_QUEUE": settings.CONCORD_GPU_QUEUE,
        "CONCORD_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--queues",
         queue, "--concurrency", "1", "--max-tasks-per-child", "1",
         "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle",
         "--loglevel", "WARNING"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    yield queue
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.fixture
def gpu_worker(settings, tmp_path):
    """A gpu-queue worker on a queue of this test's own."""
    settings.CONCORD_GPU_QUEUE = f"gpu-judge-test-{uuid.uuid4().hex[:8]}"
    yield from _worker(settings, tmp_path, settings.CONCORD_GPU_QUEUE)


@pytest.fixture
def default_worker(settings, tmp_path):
    """A default-queue worker (no gpu queue) on a queue of this test's own, standing for "default"."""
    settings.CELERY_TASK_DEFAULT_QUEUE = f"default-judge-test-{uuid.uuid4().hex[:8]}"
    yield from _worker(settings, tmp_path, settings.CELERY_TASK_DEFAULT_QUEUE)

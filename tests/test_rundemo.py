"""``manage.py rundemo``: a taken port is reported before anything starts; two workers start, one on
each queue; an import finishes while training occupies the gpu worker; Ctrl-C stops quietly."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from common.management.commands.rundemo import split_addr
from tests.helpers import tiny_models
from tests.helpers.tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parent.parent

tiny_tokenizer_dir = tiny_models.tiny_tokenizer_dir  # the fixture, shared


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("addr", "expected"), [("127.0.0.1:8001", ("127.0.0.1", 8001)), ("9000", ("127.0.0.1", 9000))]
)
def test_addresses(addr, expected):
    assert split_addr(addr) == expected


@pytest.mark.parametrize("addr", ["host:port", "127.0.0.1:70000"])
def test_bad_addresses_are_command_errors(addr):
    with pytest.raises(CommandError, match="--addr"):
        split_addr(addr)


def test_a_port_in_use_is_reported_before_anything_starts(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"port {port} .* already in use.*PORT={port + 1}"):
            call_command("rundemo", "--addr", f"127.0.0.1:{port}")
    assert "serving" not in capsys.readouterr().out


def _demo_env(var_dir: Path, **extra: str) -> dict[str, str]:
    """The demo's environment: SQLite and the filesystem broker in ``var_dir`` (a fresh folder)."""
    env = {**os.environ, "CONCORD_VAR_DIR": str(var_dir), **extra}
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)  # the embedded broker of the demo
    env.pop("CACHE_URL", None)
    return env


@contextlib.contextmanager
def _running_demo(env: dict[str, str], logs: Path) -> Iterator[dict[str, str]]:
    """``manage.py rundemo`` on a free port until both workers say they are ready; then Ctrl-C
    (SIGINT). Yields a dict that holds, once the block ends, the command's ``out``, ``err`` and
    ``returncode``."""
    port = _free_port()
    out_path, err_path = logs / "demo.out", logs / "demo.err"
    with out_path.open("w") as out, err_path.open("w") as err:
        demo = subprocess.Popen(
            [sys.executable, "manage.py", "rundemo", "--addr", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=out, stderr=err, text=True,
        )  # fmt: skip
    result: dict[str, str] = {"port": str(port)}
    try:
        deadline = time.monotonic() + 120
        while True:
            text = err_path.read_text()
            ready = all(re.search(rf"{name}@\S+ ready\.", text) for name in ("default", "gpu"))
            if ready and "Concord is serving" in out_path.read_text():
                break
            assert demo.poll() is None, err_path.read_text()[-3000:]
            assert time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.5)
        yield result
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=90)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
        result.update(out=out_path.read_text(), err=err_path.read_text())
        result["returncode"] = str(demo.returncode)


def _banner_queues(out: str) -> dict[str, list[str]]:
    """Each worker's queues as its start-up banner lists them: {"default": ["default"], ...}
    (a banner starts with `` -------------- NAME@host``; its queues are the ``.> QUEUE exchange=``
    lines)."""
    queues: dict[str, list[str]] = {}
    worker = None
    for line in out.splitlines():
        if started := re.match(r"^ -{14} (\w+)@", line):
            worker = started.group(1)
            queues[worker] = []
        elif (queue := re.match(r"^\s+\.> (\S+)\s+exchange=", line)) and worker:
            queues[worker].append(queue.group(1))
    return queues


@pytest.mark.services
def test_two_workers_start_one_per_queue_and_ctrl_c_stops_all_quietly(tmp_path):
    """The web server answers before "serving" is printed; a worker named default consumes only
    the default queue and one named gpu only the gpu queue, both ready; SIGINT (Ctrl-C) stops the
    server and both workers, prints no traceback, and the command exits 0."""
    with _running_demo(_demo_env(tmp_path), tmp_path) as demo:
        port = int(demo["port"])
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    out, err = demo["out"], demo["err"]
    assert demo["returncode"] == "0", err[-3000:]
    assert f"Concord is serving on http://127.0.0.1:{port}/" in out
    assert _banner_queues(out) == {"default": ["default"], "gpu": ["gpu"]}
    assert "Stopped the web server and the two workers." in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "No hostname was supplied" not in err
    with socket.socket() as probe:  # the port is free again: the web server is gone
        probe.bind(("127.0.0.1", port))


# Runs in a Django process of the demo's own (SQLite and the filesystem broker in the test's
# folder): a DPO run that would train for hours occupies the gpu worker; meanwhile a second run
# waits behind it and a 3-row import is uploaded. Prints one JSON object.
_BUSY_GPU_DRIVER = """
import json, time
import django
django.setup()
from django.core.files.uploadedfile import SimpleUploadedFile
from annotation.models import ImportJob
from annotation.services.import_jobs import import_job_create
from common.job_selectors import job_waiting_text
from tests.factories import snapshot_of_pairs, training_run
from training import services
from training.models import TrainingRun

def wait(fetch, done, timeout):
    deadline = time.monotonic() + timeout
    while not done(found := fetch()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found

snapshot = snapshot_of_pairs(slug="busy-gpu")
config = {"max_steps": 100_000, "epochs": 100_000, "batch_size": 2, "max_length": 64,
          "checkpoint_every": 0, "learning_rate": 1e-3}
run = training_run(snapshot=snapshot, config=config, name="long run")
services.run_launch(run=run, user=None)
run = wait(lambda: TrainingRun.objects.get(pk=run.pk), lambda r: r.step > 0 or r.error, 240)
second = training_run(snapshot=snapshot, config=config, name="second run")
services.run_launch(run=second, user=None)
waits = job_waiting_text(job=TrainingRun.objects.get(pk=second.pk))
rows = "".join(
    json.dumps({"prompt": f"new prompt {i}", "response_a": "yes", "response_b": "no"}) + "\\n"
    for i in range(3)
).encode()
started = time.monotonic()
job = import_job_create(project=snapshot.export.project, created_by=None,
                        upload=SimpleUploadedFile("more.jsonl", rows))
job = wait(lambda: ImportJob.objects.get(pk=job.pk), lambda j: j.status in ("succeeded", "failed"), 90)
import_s = time.monotonic() - started
during = TrainingRun.objects.get(pk=run.pk)
services.run_cancel(run=second, user=None)
services.run_cancel(run=during, user=None)
stopped = wait(lambda: TrainingRun.objects.get(pk=run.pk), lambda r: r.status != "running", 60)
print(json.dumps({
    "run": run.pk, "run_error": run.error[-2000:], "run_step_before_import": run.step,
    "run_status_after_import": during.status, "run_step_after_import": during.step,
    "run_final_status": stopped.status, "waits": waits,
    "import_status": job.status, "import_summary": job.result.get("summary", ""),
    "import_errors": job.errors[:5], "import_s": round(import_s, 2),
}))
"""


@pytest.mark.services
def test_an_import_finishes_while_a_training_run_occupies_the_gpu_worker(
    tmp_path, tiny_tokenizer_dir
):
    """The demo as `make demo` runs it (SQLite, the filesystem broker, rundemo's two workers): a
    DPO run of a tiny model trains on the gpu worker, and an import uploaded meanwhile is done
    in seconds while the run is still running (with one worker for both queues it waited for the
    run to end). A second run queued meanwhile says it waits behind the first on the gpu queue."""
    tiny_llama(tmp_path / "models" / "smollm2-135m-instruct", tiny_tokenizer_dir)
    env = _demo_env(tmp_path, CONCORD_MODELS_DIR=str(tmp_path / "models"))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True
    )
    with _running_demo(env, tmp_path):
        driver = subprocess.run(
            [sys.executable, "-c", _BUSY_GPU_DRIVER],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=480,
        )  # fmt: skip
    assert driver.returncode == 0, driver.stderr[-3000:]
    result = json.loads(driver.stdout.strip().splitlines()[-1])
    print(result)  # the measured import time, for the record
    assert result["run_error"] == "" and result["run_step_before_import"] > 0
    assert result["import_status"] == "succeeded", result["import_errors"]
    assert result["run_status_after_import"] == "running"
    assert result["import_s"] < 30
    assert result["waits"] == (
        f"Queued: waiting behind training run #{result['run']} (running) on the gpu queue."
    )
    assert result["run_final_status"] == "cancelled"

"""The gpu worker's side of a run: claim it, build its configuration, run the recipe with callbacks
that write progress, metrics, checkpoints and heartbeats to the database, and record the end.

One GPU (or the CPU): the recipe runs in this process (Celery starts a fresh one per task). Several
GPUs: the recipe runs under ``torchrun`` (or ``deepspeed``) as a subprocess through
``python -m training.launch``; its JSON lines are followed here, and cancel is passed on as a file.
Imports of torch and the recipes happen inside these functions: only worker processes load them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings

from common.lifecycle import JobHeartbeat, worker_name
from training import progress_services, services
from training.models import TrainingRun

CANCEL_FILE = "CANCEL"


def _database_callback(run_id: int, heartbeat: JobHeartbeat):
    """The recipe's callback: progress, metrics and checkpoints to the database; stop on cancel."""
    from training.recipes.callbacks import TrainingCallback

    class DatabaseCallback(TrainingCallback):
        def __init__(self) -> None:
            self.total: int | None = None
            self.last_metrics: dict[str, Any] = {}
            self.last_write = 0.0
            self.last_poll = 0.0
            self.last_phase_write = 0.0
            self.phase = ""  # the phase last written, until the next step

        def on_start(self, *, total_steps: int, config: Mapping[str, Any]) -> None:
            self.total = total_steps
            services.run_progress(run_id=run_id, step=0, total_steps=total_steps)
            if not self.phase:  # a phase left over from an earlier attempt
                progress_services.run_phase_clear(run_id=run_id)

        def on_phase(self, *, phase: str, done: int, total: int) -> None:
            # At most one write a second, but always the first and the last batch of a phase.
            now = time.monotonic()
            if phase != self.phase or now - self.last_phase_write >= 1.0 or done >= total > 0:
                progress_services.run_phase_record(
                    run_id=run_id, phase=phase, done=done, total=total
                )
                self.last_phase_write = now
                self.phase = phase

        def on_step(self, *, step: int, total_steps: int) -> None:
            self.total = total_steps
            if self.phase:
                progress_services.run_phase_clear(run_id=run_id)
                self.phase = ""
            now = time.monotonic()
            if now - self.last_write >= 1.0 or step == total_steps:
                services.run_progress(run_id=run_id, step=step, total_steps=total_steps)
                self.last_write = now

        def on_log(self, *, step: int, metrics: Mapping[str, float]) -> None:
            self.last_metrics = dict(metrics)
            services.metrics_record(run_id=run_id, step=step, metrics=metrics)

        def on_checkpoint(self, *, step: int, path: Path) -> None:
            services.run_progress(run_id=run_id, step=step, total_steps=self.total)
            services.checkpoint_record(
                run_id=run_id, step=step, path=str(path), metrics=self.last_metrics
            )

        def on_samples(self, *, step: int, samples: Sequence[Mapping[str, Any]]) -> None:
            progress_services.samples_record(run_id=run_id, step=step, samples=samples)

        def should_stop(self) -> bool:
            # The heartbeat thread notices cancel between steps too; this read covers a loop whose
            # own connection is the only one that sees the run (and costs one query a second).
            now = time.monotonic()
            if not heartbeat.cancel.is_set() and now - self.last_poll >= heartbeat.every_s:
                self.last_poll = now
                if TrainingRun.objects.filter(pk=run_id, cancel_requested=True).exists():
                    heartbeat.cancel.set()
            return heartbeat.cancel.is_set()

    return DatabaseCallback()


def launch_command(*, gpus: int, config_path: Path, launcher: str | None = None) -> list[str]:
    """The command line that runs the recipe on ``gpus`` GPUs of this machine.

    ``launcher``: "torchrun" (default) or "deepspeed" (when the config names a DeepSpeed config).
    """
    if gpus < 2:
        raise ValueError("launch_command is for two or more GPUs")
    module = ["-m", "training.launch", str(config_path)]
    if launcher == "deepspeed":
        return ["deepspeed", f"--num_gpus={gpus}", "--module", "training.launch", str(config_path)]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={gpus}",
        *module,
    ]


class LauncherFailed(RuntimeError):
    """The launcher (torchrun or deepspeed) exited with a non-zero ``returncode``."""

    def __init__(self, command: list[str], returncode: int) -> None:
        super().__init__(f"{command[0]} exited with {returncode}")
        self.returncode = returncode


def launcher_lines(command: list[str]) -> Iterator[str]:
    """Run the launcher ``command`` (``launch_command``) from the project folder and yield its
    stdout lines (rank 0's JSON lines) as they come; ``LauncherFailed`` when it exits non-zero."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, cwd=settings.BASE_DIR, env=os.environ.copy()
    ) as process:
        assert process.stdout is not None
        yield from process.stdout
        if process.wait() != 0:
            raise LauncherFailed(command, process.returncode)


def _follow(run: TrainingRun, command: list[str], heartbeat: JobHeartbeat) -> dict[str, Any]:
    """Run the launcher, turning its JSON lines into metrics; returns the summary line."""
    from training.recipes.checkpoint_files import complete_checkpoints  # no torch

    output = Path(run.output_dir)
    summary: dict[str, Any] = {}
    known_checkpoints: set[str] = set()
    for line in launcher_lines(command):
        if heartbeat.cancel.is_set():
            (output / CANCEL_FILE).touch()
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("event") == "summary":
            summary = row
        elif "step" in row:
            step = int(row.pop("step"))
            services.metrics_record(run_id=run.pk, step=step, metrics=row)
            services.run_progress(run_id=run.pk, step=step, total_steps=run.total_steps)
        for step, folder in complete_checkpoints(output):
            if folder.name not in known_checkpoints:
                known_checkpoints.add(folder.name)
                services.checkpoint_record(run_id=run.pk, step=step, path=str(folder), metrics={})
    return summary


def run_execute(*, run_id: int, worker: str | None = None) -> str:
    """Run a queued run to its end on this worker; returns the final status ('skipped' when the run
    was not queued: a duplicate message, or a run cancelled before it started)."""
    run = services.run_claim(run_id=run_id, worker=worker or worker_name())
    if run is None:
        return "skipped"
    # The one job lifecycle's heartbeat thread: it also notices a cancel request (or a reaped run).
    heartbeat = JobHeartbeat(model=TrainingRun, pk=run.pk)
    heartbeat.start()
    try:
        from training.recipes import config_from_dict, run_training

        values = services.run_config_resolved(run)
        config = config_from_dict({"kind": run.kind, **values})
        output = Path(run.output_dir)
        output.mkdir(parents=True, exist_ok=True)
        (output / CANCEL_FILE).unlink(missing_ok=True)
        use_launcher = run.gpus > 1 and shutil.which("nvidia-smi") is not None
        if use_launcher:
            config_path = output / "launch-config.json"
            config.save(config_path)
            summary = _follow(
                run, launch_command(gpus=run.gpus, config_path=config_path), heartbeat
            )
            status = summary.get("status", "completed")
        else:
            result = run_training(config, callbacks=[_database_callback(run.pk, heartbeat)])
            summary, status = result.summary, result.status
        final = (
            TrainingRun.Status.SUCCEEDED if status == "completed" else TrainingRun.Status.CANCELLED
        )
        services.run_finish(run_id=run.pk, status=final, summary=_jsonable(summary))
        return final
    except Exception:
        services.run_finish(
            run_id=run.pk, status=TrainingRun.Status.FAILED, error=traceback.format_exc()
        )
        return TrainingRun.Status.FAILED
    finally:
        heartbeat.stop()


def _jsonable(summary: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(summary), default=str))

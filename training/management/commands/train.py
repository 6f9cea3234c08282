"""python manage.py train --kind {rm,dpo,simpo,orpo,kto,ppo,rloo,grpo} --data FILE.jsonl
--model NAME_OR_DIR ...

Other options: --output DIR (required), the settings below and --set KEY=VALUE. KTO trains on the
pairs of --data split into desirable and undesirable examples, or on ``--unpaired-file FILE.jsonl``
(TRL's unpaired format; --data may then be left out). GRPO takes its verifiable rewards as
``--reward 'NAME [JSON options]'`` (repeatable) with ``--reward-weight W``.

Runs one training job in this process (debugging, scripts, benchmarks): one JSON line per logged
step on stdout, then a JSON summary with pairs (or samples) and tokens per second. Ctrl-C stops after
the current step with a checkpoint; running the same command again resumes from it.

``--nproc N`` runs it data-parallel in N processes instead (one per GPU; Gloo on CPU): the resolved
config is written to DIR/launch-config.json and ``torchrun`` runs ``training.launch`` on it, whose
rank 0 prints the same lines. ``--list-options --kind K`` prints K's settings and needs nothing else.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.errors import ModelUnavailableError
from training.services import reference_cache_dir

PROGRESS_EVERY_S = 2.0  # at most one progress line this often while a phase runs


def _model_folder(name_or_dir: str) -> str:
    """A folder path as given, or the registry's folder for a model name."""
    if Path(name_or_dir).is_dir():
        return str(Path(name_or_dir).resolve())
    from common.model_registry import model_path

    try:
        return str(model_path(name_or_dir))
    except ModelUnavailableError as exc:
        raise CommandError(str(exc)) from exc


def _parse_setting(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise CommandError(f"--set expects KEY=VALUE, got {text!r}")
    try:
        return key.replace("-", "_"), json.loads(raw)
    except json.JSONDecodeError:
        return key.replace("-", "_"), raw


def _startup_warnings(config: Any) -> list[str]:
    """Settings that will run but obviously waste the run, said before it starts."""
    if config.kind not in ("ppo", "rloo", "grpo"):
        return []
    from training.recipes.models import load_tokenizer
    from training.recipes.online import eos_budget_warning, reference_answer_lengths

    lengths = reference_answer_lengths(config.data, load_tokenizer(config.model))
    warning = eos_budget_warning(config, lengths)
    return [warning] if warning else []


class Command(BaseCommand):
    help = (
        "Train a reward model, or a policy with DPO, SimPO, ORPO, KTO, PPO, RLOO or GRPO, in "
        "this process."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        from training.recipes.kinds import kind_names  # web code imports training.recipes in use

        parser.add_argument("--kind", choices=kind_names(), required=True)
        # Required unless --list-options (checked in handle, so listing needs only --kind).
        parser.add_argument("--data", help="JSONL: preference pairs or prompts (required)")
        parser.add_argument(
            "--unpaired-file",
            help="kto: JSONL of {prompt, completion, label} rows to train on instead of --data's pairs",
        )
        parser.add_argument("--model", help="registry name or model folder (required)")
        parser.add_argument("--output", help="run folder, created (required)")
        parser.add_argument("--batch-size", type=int, help="pairs or prompts per optimiser step")
        parser.add_argument("--micro-batch-size", type=int, help="rows per forward pass")
        parser.add_argument("--max-length", type=int, help="longest sequence in tokens")
        parser.add_argument("--epochs", type=int)
        parser.add_argument("--max-steps", type=int)
        parser.add_argument("--learning-rate", type=float)
        parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
        parser.add_argument("--reward-model", help="ppo/rloo/grpo: registry name or folder")
        parser.add_argument(
            "--ref-model", help="dpo/kto/ppo/rloo/grpo: reference model (default: --model)"
        )
        parser.add_argument(
            "--reward",
            action="append",
            default=[],
            metavar="'[LABEL=]NAME [JSON]'",
            help="grpo: a verifiable reward, e.g. --reward 'length_penalty {\"target\": 60}'",
        )
        parser.add_argument(
            "--reward-weight",
            action="append",
            type=float,
            default=[],
            help="grpo: the weight of each --reward, in order (default 1.0 each)",
        )
        parser.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints")
        parser.add_argument(
            "--lora-rank", type=int, help="train LoRA adapters of this rank (0, the default: off)"
        )
        parser.add_argument("--lora-alpha", type=float, help="LoRA scale alpha (default 32)")
        parser.add_argument("--lora-dropout", type=float, help="LoRA dropout (default 0.05)")
        parser.add_argument(
            "--lora-target-modules",
            help="comma-separated layer names, e.g. q_proj,v_proj (default: by architecture)",
        )
        parser.add_argument(
            "--merge-lora", action="store_true", help="also save merged weights in final/merged/"
        )
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="any other config field (JSON value), e.g. --set beta=0.2; see --list-options",
        )
        parser.add_argument(
            "--list-options", action="store_true", help="print the kind's fields and exit"
        )
        parser.add_argument(
            "--nproc",
            type=int,
            default=1,
            help="data-parallel processes (GPUs): > 1 runs the recipe under torchrun",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from transformers.utils import logging as hf_logging

        from training.recipes import (
            ConfigError,
            JsonLinesReporter,
            TrainingCallback,
            config_class,
            run_training,
        )

        cls = config_class(options["kind"])
        if options["list_options"]:
            from training.recipes import config_help

            for name, default, help_text in config_help(cls):
                self.stdout.write(f"{name:24} {default!r:>14}  {help_text}")
            return

        if options["unpaired_file"] and options["kind"] != "kto":
            raise CommandError("--unpaired-file: only with --kind kto")
        if options["unpaired_file"] and not options["data"]:
            options["data"] = options["unpaired_file"]  # the recipe reads the unpaired file only
        missing = [f"--{name}" for name in ("data", "model", "output") if not options[name]]
        if missing:
            raise CommandError(
                f"{', '.join(missing)}: required (only --list-options runs without them)"
            )
        if options["nproc"] < 1:
            raise CommandError(f"--nproc: must be >= 1, got {options['nproc']}")

        values: dict[str, Any] = {
            "model": _model_folder(options["model"]),
            "data": options["data"],
            "output_dir": options["output"],
            "resume": not options["no_resume"],
        }
        for option, field in (
            ("batch_size", "batch_size"),
            ("micro_batch_size", "micro_batch_size"),
            ("max_length", "max_length"),
            ("epochs", "epochs"),
            ("max_steps", "max_steps"),
            ("learning_rate", "learning_rate"),
            ("lora_rank", "lora_rank"),
            ("lora_alpha", "lora_alpha"),
            ("lora_dropout", "lora_dropout"),
        ):
            if options[option] is not None:
                values[field] = options[option]
        if options["bf16"]:
            values["bf16"] = True
        if options["merge_lora"]:
            values["merge_lora"] = True
        if options["lora_target_modules"]:
            values["lora_target_modules"] = [
                name.strip() for name in options["lora_target_modules"].split(",") if name.strip()
            ]
        for option in ("reward_model", "ref_model"):
            if options[option]:
                values[option] = _model_folder(options[option])
        if options["kind"] in ("dpo", "kto"):
            values["reference_cache_dir"] = reference_cache_dir()
        if options["unpaired_file"]:
            if not Path(options["unpaired_file"]).is_file():
                raise CommandError(f"--unpaired-file: no such file {options['unpaired_file']}")
            values["unpaired_data"] = options["unpaired_file"]
        if options["reward"] or options["reward_weight"]:
            if options["kind"] != "grpo":
                raise CommandError("--reward and --reward-weight: only with --kind grpo")
            values["rewards"] = tuple(options["reward"])
            values["reward_weights"] = tuple(options["reward_weight"])
        values.update(_parse_setting(text) for text in options["set"])
        if not Path(values["data"]).is_file():
            raise CommandError(f"--data: no such file {values['data']}")
        try:
            config = cls(**values)
        except (ConfigError, TypeError) as exc:
            raise CommandError(str(exc)) from exc

        if getattr(config, "deepspeed", "none") != "none":
            from training.recipes.runtime import resolve_device
            from training.recipes.zero import require_zero_available

            try:
                require_zero_available(config, resolve_device(config.device).type)
            except ConfigError as exc:
                raise CommandError(str(exc)) from exc
        if options["verbosity"] >= 2:  # -v 2: the first few truncated or dropped inputs
            fit_log = logging.getLogger("training.fit")
            fit_log.setLevel(logging.DEBUG)
            fit_log.addHandler(logging.StreamHandler(self.stderr))
        for warning in _startup_warnings(config):
            self.stderr.write(f"warning: {warning}")
        if options["nproc"] > 1:
            self._launch(config, options["nproc"])
            return

        interrupted = {"flag": False}
        stderr = self.stderr

        class PhaseProgress(TrainingCallback):
            """Work before the first step (DPO's reference pass) as lines on stderr, e.g.
            ``reference log-probs: batch 3 of 4``: the first and last always, at most one every 2 s
            between them (stdout stays JSON lines)."""

            last = -math.inf

            def on_phase(self, *, phase: str, done: int, total: int) -> None:
                now = time.monotonic()
                if done in (0, total) or now - self.last >= PROGRESS_EVERY_S:
                    self.last = now
                    stderr.write(f"{phase}: batch {done}" + (f" of {total}" if total else ""))

        class StopOnInterrupt(TrainingCallback):
            def should_stop(self) -> bool:
                return interrupted["flag"]

        def on_sigint(signum: int, frame: Any) -> None:
            interrupted["flag"] = True

        previous = signal.signal(signal.SIGINT, on_sigint)
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        reporter = JsonLinesReporter(self.stdout)
        progress = PhaseProgress()
        try:
            result = run_training(config, callbacks=[reporter, progress, StopOnInterrupt()])
        except (ValueError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        finally:
            signal.signal(signal.SIGINT, previous)
        if result.status != "completed":
            raise CommandError(
                f"run {result.status} at step {result.steps}; run the same command to resume"
            )

    def _launch(self, config: Any, nproc: int) -> None:
        """Run the recipe in ``nproc`` processes under torchrun, passing rank 0's lines through."""
        from training.worker import LauncherFailed, launch_command, launcher_lines

        output = Path(config.output_dir)
        output.mkdir(parents=True, exist_ok=True)
        config_path = output / "launch-config.json"
        config.save(config_path)
        command = launch_command(gpus=nproc, config_path=config_path)
        try:
            for line in launcher_lines(command):
                self.stdout.write(line.rstrip("\n"))
        except LauncherFailed as exc:
            raise CommandError(
                f"torchrun exited with {exc.returncode}: {' '.join(command)}"
            ) from exc

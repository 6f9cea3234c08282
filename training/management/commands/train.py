"""python manage.py train --kind KIND --data FILE.jsonl --model NAME_OR_DIR ...

KIND is a name of the kind registry (training.recipes.kinds). Other options: --output DIR
(required), the options below, one ``--field-name`` per setting of any kind's config dataclass
(generated from the fields, their help and choices, as HfArgumentParser does; a setting the chosen
kind does not have is refused) and --set KEY=VALUE. KTO trains on the
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

import argparse
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
    from training.recipes.kinds import kind_spec

    if not kind_spec(config.kind).rollouts:
        return []
    from training.recipes.models import load_tokenizer
    from training.recipes.online import eos_budget_warning, reference_answer_lengths

    lengths = reference_answer_lengths(config.data, load_tokenizer(config.model))
    warning = eos_budget_warning(config, lengths)
    return [warning] if warning else []


# Config fields the hand-written options above set (the option that sets each): no generated option.
HAND_SET_FIELDS = {
    "data": "--data",
    "unpaired_data": "--unpaired-file",
    "model": "--model",
    "output_dir": "--output",
    "reward_model": "--reward-model",
    "ref_model": "--ref-model",
    "rewards": "--reward",
    "reward_weights": "--reward-weight",
    "resume": "--no-resume",
    "lora_target_modules": "--lora-target-modules",
}
FIELD_DEST = "field__"  # generated options' dest prefix, apart from the hand-written ones


def _kinds_with(field_name: str) -> list[str]:
    """The registry's kinds whose config has the settable field ``field_name``, in order."""
    from training.recipes.kinds import KINDS

    return [name for name, spec in KINDS.items() if spec.has_field(field_name)]


def _field_options() -> dict[str, tuple[Any, list[str]]]:
    """Each settable field of any kind's config, once: name -> (FieldSpec of its first kind, the
    kinds that have it)."""
    from training.recipes.config import config_fields
    from training.recipes.kinds import KINDS

    fields: dict[str, tuple[Any, list[str]]] = {}
    for name, spec in KINDS.items():
        for field_spec in config_fields(spec.config_class):
            if field_spec.name in fields:
                fields[field_spec.name][1].append(name)
            else:
                fields[field_spec.name] = (field_spec, [name])
    return fields


def _add_field_option(parser: CommandParser, spec: Any, kinds: list[str], every: bool) -> None:
    """``--field-name`` for one config field: typed, with its choices and help, prefixed with the
    kinds that have it when not every kind does. A bool field is a flag (``--x`` / ``--no-x``); a
    tuple field takes its values after the option. Unset, the kind's default holds."""
    option = "--" + spec.name.replace("_", "-")
    help_text = spec.help if every else f"{', '.join(kinds)}: {spec.help}"
    kwargs: dict[str, Any] = {"dest": FIELD_DEST + spec.name, "help": help_text.replace("%", "%%")}
    if spec.type is bool:
        parser.add_argument(option, action=argparse.BooleanOptionalAction, **kwargs)
        return
    if spec.type is tuple:
        kwargs.update(nargs=spec.length or "+", type=spec.items)
    else:
        kwargs["type"] = spec.type
    if spec.choices:
        kwargs["choices"] = spec.choices
    else:
        kwargs["metavar"] = spec.name.upper()
    parser.add_argument(option, **kwargs)


class Command(BaseCommand):
    @property
    def help(self) -> str:  # type: ignore[override]
        from training.recipes.kinds import KINDS

        labels = [spec.label for spec in KINDS.values()]
        return f"Train a run of one kind ({', '.join(labels)}) in this process."

    def add_arguments(self, parser: CommandParser) -> None:
        # The recipes package loads no torch, but web code imports it only where used.
        from training.recipes.kinds import kind_names

        parser.add_argument("--kind", choices=kind_names(), required=True)
        # Required unless --list-options (checked in handle, so listing needs only --kind).
        parser.add_argument("--data", help="JSONL: preference pairs or prompts (required)")
        parser.add_argument(
            "--unpaired-file",
            help=f"{'/'.join(_kinds_with('unpaired_data'))}: JSONL of {{prompt, completion, label}} "
            "rows to train on instead of --data's pairs",
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
        parser.add_argument(
            "--reward-model",
            help=f"{'/'.join(_kinds_with('reward_model'))}: registry name or folder",
        )
        parser.add_argument(
            "--ref-model",
            help=f"{'/'.join(_kinds_with('ref_model'))}: reference model (default: --model)",
        )
        parser.add_argument(
            "--reward",
            action="append",
            default=[],
            metavar="'[LABEL=]NAME [JSON]'",
            help=f"{'/'.join(_kinds_with('rewards'))}: a verifiable reward, e.g. "
            "--reward 'length_penalty {\"target\": 60}'",
        )
        parser.add_argument(
            "--reward-weight",
            action="append",
            type=float,
            default=[],
            help=f"{'/'.join(_kinds_with('reward_weights'))}: the weight of each --reward, in "
            "order (default 1.0 each)",
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
        fields = _field_options()
        taken = set(parser._option_string_actions)
        group = parser.add_argument_group(
            "settings (each kind's config fields; see --list-options)"
        )
        for name, (spec, kinds) in fields.items():
            if name in HAND_SET_FIELDS or "--" + name.replace("_", "-") in taken:
                continue
            _add_field_option(group, spec, kinds, every=len(kinds) == len(kind_names()))

    def handle(self, *args: Any, **options: Any) -> None:
        from transformers.utils import logging as hf_logging

        from training.recipes import (
            ConfigError,
            JsonLinesReporter,
            TrainingCallback,
            config_class,
            run_training,
        )
        from training.recipes.kinds import kind_spec

        cls = config_class(options["kind"])
        if options["list_options"]:
            from training.recipes import config_help

            for name, default, help_text in config_help(cls):
                self.stdout.write(f"{name:24} {default!r:>14}  {help_text}")
            return

        spec = kind_spec(options["kind"])
        self._refuse_foreign_options(spec, options)
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
        if spec.has_reference_pass:
            values["reference_cache_dir"] = reference_cache_dir()
        if options["unpaired_file"]:
            if not Path(options["unpaired_file"]).is_file():
                raise CommandError(f"--unpaired-file: no such file {options['unpaired_file']}")
            values["unpaired_data"] = options["unpaired_file"]
        if options["reward"] or options["reward_weight"]:
            values["rewards"] = tuple(options["reward"])
            values["reward_weights"] = tuple(options["reward_weight"])
        for key, value in options.items():
            if key.startswith(FIELD_DEST) and value is not None:
                values[key.removeprefix(FIELD_DEST)] = (
                    tuple(value) if isinstance(value, list) else value
                )
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

    def _refuse_foreign_options(self, spec: Any, options: dict[str, Any]) -> None:
        """CommandError for an option that sets a field the chosen kind's config does not have,
        naming the kinds that have it (nothing has run yet)."""
        given = [
            (field_name, option)
            for field_name, option in HAND_SET_FIELDS.items()
            if option in ("--unpaired-file", "--reward", "--reward-weight")
            and options[option.removeprefix("--").replace("-", "_")]
        ]
        given += [
            (key.removeprefix(FIELD_DEST), "--" + key.removeprefix(FIELD_DEST).replace("_", "-"))
            for key, value in options.items()
            if key.startswith(FIELD_DEST) and value is not None
        ]
        for field_name, option in given:
            if not spec.has_field(field_name):
                kinds = ", ".join(_kinds_with(field_name))
                if option in ("--reward", "--reward-weight"):
                    option = "--reward and --reward-weight"
                raise CommandError(f"{option}: only with --kind {kinds}")

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

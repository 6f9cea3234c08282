"""Reward-model ensembles (issue #33) beside the reward-model recipe: the held-out numbers of K
members (``ensemble_eval_metrics``) and the independent mode's trainer (``train_independent_ensemble``:
K separately initialised models one after another, each through the recipe's one-model trainer,
which the recipe passes in, so this module does not import it).

The heads mode lives in the recipe itself (one model with K outputs, ``reward_model``); the saved
format both modes write is ``scoring.EnsembleManifest``'s.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.algorithms import bradley_terry_loss
from training.recipes.callbacks import CallbackList, TrainingCallback
from training.recipes.config import RewardModelConfig
from training.recipes.loop import finish_run, start_run
from training.recipes.runtime import TrainResult
from training.recipes.scoring import ENSEMBLE_FILE, EnsembleManifest


def ensemble_eval_metrics(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, float]:
    """Held-out numbers from member rewards, chosen and rejected: [K, n] each.

    The ensemble scores a response with the members' mean: ``eval/accuracy`` (mean chosen above
    mean rejected), ``eval/loss`` (Bradley-Terry on the means), ``eval/reward_mean`` and
    ``eval/reward_std`` (of all mean rewards; a std under 0.05 is PIPELINE.md's reward-collapse
    alarm), ``eval/pairs``. With K > 1 also each member's accuracy (``eval/member_k/accuracy``),
    their mean, and ``eval/ensemble_std``: the members' population std of the reward difference,
    averaged over pairs. With K = 1 these are a single model's numbers."""
    c, r = chosen.mean(dim=0), rejected.mean(dim=0)
    everything = torch.cat([c, r])
    metrics = {
        "eval/accuracy": float((c > r).float().mean()),
        "eval/loss": float(bradley_terry_loss(c, r)),
        "eval/reward_mean": float(everything.mean()),
        "eval/reward_std": float(everything.std()) if everything.numel() > 1 else 0.0,
        "eval/pairs": float(chosen.shape[1]),
    }
    if chosen.shape[0] > 1:
        member_accuracy = (chosen > rejected).float().mean(dim=1)
        for k, accuracy in enumerate(member_accuracy.tolist()):
            metrics[f"eval/member_{k}/accuracy"] = accuracy
        metrics["eval/member_accuracy_mean"] = float(member_accuracy.mean())
        spread = (chosen - rejected).var(dim=0, unbiased=False).sqrt()
        metrics["eval/ensemble_std"] = float(spread.mean())
    return metrics


class MemberCallback(TrainingCallback):
    """What member ``index`` of ``size`` tells the ensemble run's callbacks: its phases and
    metrics named as the member's (``member_k/``), its steps counted on from the members before
    it, the run's cancel; its own start and end stay inside (the ensemble run has one of each)."""

    def __init__(self, parent: CallbackList, index: int, size: int) -> None:
        self.parent, self.index, self.size = parent, index, size
        self.offset = 0

    def on_start(self, *, total_steps: int, config: Any) -> None:
        self.offset = self.index * total_steps
        if self.index == 0:
            self.parent.on_start(total_steps=total_steps * self.size, config=config)

    def on_phase(self, *, phase: str, done: int, total: int) -> None:
        self.parent.on_phase(
            phase=f"member {self.index + 1}/{self.size}: {phase}", done=done, total=total
        )

    def on_step(self, *, step: int, total_steps: int) -> None:
        self.parent.on_step(step=self.offset + step, total_steps=total_steps * self.size)

    def on_log(self, *, step: int, metrics: Any) -> None:
        prefixed = {f"member_{self.index}/{name}": value for name, value in metrics.items()}
        self.parent.on_log(step=self.offset + step, metrics=prefixed)

    def should_stop(self) -> bool:
        return self.parent.should_stop()


def _independent_eval(root: Path, size: int) -> dict[str, float]:
    """The ensemble's held-out numbers from each member's ``MEMBER_EVAL_FILE`` ({} without)."""
    files = [root / f"member_{k}" / MEMBER_EVAL_FILE for k in range(size)]
    if not all(f.is_file() for f in files):
        return {}
    rows = [json.loads(f.read_text()) for f in files]
    chosen = torch.tensor([row["chosen"] for row in rows])
    rejected = torch.tensor([row["rejected"] for row in rows])
    return ensemble_eval_metrics(chosen, rejected)


@dataclass(frozen=True)
class EnsembleMember:
    """Member ``index`` of an independent ensemble of ``size``: it trains on its own bootstrap row
    of the training pairs and holds out the pairs ``split_seed`` (the ensemble's seed) holds out."""

    index: int
    size: int
    split_seed: int


MEMBER_EVAL_FILE = "eval_rewards.json"  # a member's held-out rewards, for the ensemble's numbers


def train_independent_ensemble(
    config: RewardModelConfig,
    callback: TrainingCallback | None,
    *,
    train_member: Callable[[RewardModelConfig, TrainingCallback, EnsembleMember], TrainResult],
) -> TrainResult:
    """K independently initialised reward models (``ensemble_mode`` "independent"), one after
    another in ``output_dir/member_k`` (seed ``seed + k``, bootstrap row k, the ensemble's
    held-out pairs, each trained by ``train_member``: the recipe's one-model trainer); ``final/``
    gets each member's final model as ``member_k/`` and
    ``ensemble.json``. A resumed run keeps the members that completed. The held-out numbers are
    the ensemble's (``ensemble_eval_metrics`` on the members' saved held-out rewards)."""
    run = start_run(config, callback)
    size, root = config.ensemble_size, Path(config.output_dir)
    summaries: list[dict[str, Any]] = []
    steps = 0
    for k in range(size):
        member_config = dataclasses.replace(
            config,
            ensemble_size=1,
            seed=config.seed + k,
            output_dir=str(root / f"member_{k}"),
            warm_start=None
            if config.warm_start is None
            else str(Path(config.warm_start) / f"member_{k}"),
        )
        finished = Path(member_config.output_dir) / "summary.json"
        if config.resume and finished.is_file() and '"completed"' in finished.read_text():
            summaries.append(json.loads(finished.read_text()))
            continue
        result = train_member(
            member_config,
            MemberCallback(run.callback, k, size),
            EnsembleMember(index=k, size=size, split_seed=config.seed),
        )
        steps += result.steps
        if result.status != "completed":
            summary = {"kind": "rm", "ensemble_size": size, "members_completed": k}
            return finish_run(
                run, status=result.status, step=steps, model=None, tokenizer=None, summary=summary
            )
        summaries.append(result.summary)
    evaluation = _independent_eval(root, size)
    if evaluation:
        run.callback.on_log(step=steps, metrics=evaluation)
    if run.ranks.main:
        final = root / "final"
        final.mkdir(parents=True, exist_ok=True)
        for k in range(size):
            shutil.copytree(
                root / f"member_{k}" / "final", final / f"member_{k}", dirs_exist_ok=True
            )
        manifest = EnsembleManifest.independent(size)
        (final / ENSEMBLE_FILE).write_text(json.dumps(manifest.payload(), indent=2))
        (final / "reward_stats.json").write_text(json.dumps(evaluation, indent=2))
    first = summaries[0]
    summary = {
        "kind": "rm",
        "ensemble_size": size,
        "ensemble_mode": "independent",
        **{key: first[key] for key in ("pairs", "train_pairs", "eval_pairs") if key in first},
        "pairs_trained": sum(s.get("pairs_trained", 0) for s in summaries),
        "train_seconds": sum(s.get("train_seconds", 0.0) for s in summaries),
        "bf16": config.bf16,
        **evaluation,
    }
    return finish_run(
        run, status="completed", step=steps, model=None, tokenizer=None, summary=summary
    )

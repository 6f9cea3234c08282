"""Reads of the prompts an eval round may use: those of its project that neither model it compares
trained on.

What a run trained on is its snapshot's frozen data file (``training.services`` hands that file to
every kind: ``pairs.jsonl``, the preference pairs of rm, dpo, simpo, orpo and kto and the prompts
ppo, rloo and grpo roll out on, or a rating or ranking project's rows; each row has a prompt). A
prompt of the project is "trained on" when a row of that file names its comparison
(``comparison_id``) or holds the same prompt (``Prompt.content_hash`` of the row's text or messages,
so a run trained on another project's copy of the prompt counts too). The prompts left are held out:
the project's prompts added after the export, or never labelled into it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from annotation.models import Comparison, Project, Prompt
from annotation.parsing import content_hash
from annotation.services.exporting import export_data_path
from common.errors import ConcordError
from training.models import Checkpoint, TrainingRun


@dataclass(frozen=True)
class HeldOut:
    """The prompts of ``project`` a round comparing the ``runs``' checkpoints may use.

    ``trained_ids``: the project's prompts in some run's training data (never drawn);
    ``n_available``: the others; ``n_project``: all the project's prompts."""

    project: Project
    runs: tuple[TrainingRun, ...]
    trained_ids: frozenset[int]
    n_project: int

    @property
    def n_available(self) -> int:
        return self.n_project - len(self.trained_ids)

    def runs_label(self) -> str:
        """ "run #3" or "runs #3 and #5"."""
        numbers = [f"#{run.pk}" for run in self.runs]
        if len(numbers) == 1:
            return f"run {numbers[0]}"
        return f"runs {', '.join(numbers[:-1])} and {numbers[-1]}"

    def message(self) -> str:
        """What the numbers mean, in plain words, for the form and for a refusal."""
        slug, runs = self.project.slug, self.runs_label()
        if self.n_project == 0:
            return f"Project {slug} has no prompts."
        if self.n_available == 0:
            return (
                f"None of the {self.n_project} prompts of {slug} is held out: every one is in the "
                f"training data of {runs}. Import prompts the model did not train on (they are "
                "held out until an export that trains a model includes them)."
            )
        return (
            f"{self.n_available} of the {self.n_project} prompts of {slug} are held out (not in "
            f"the training data of {runs}): a round can use at most {self.n_available}."
        )


class TrainingDataMissing(ConcordError):
    """A run's training file is gone: which prompts it trained on cannot be told."""


def _trained_rows(run: TrainingRun) -> tuple[set[str], set[int]]:
    """(prompt content hashes, comparison ids) of the run's training file."""
    hashes: set[str] = set()
    comparisons: set[int] = set()
    path = export_data_path(run.snapshot.export)
    if not path.is_file():
        raise TrainingDataMissing(
            f"The training data of run #{run.pk} is missing ({path}): which prompts it trained "
            "on cannot be told."
        )
    with path.open(encoding="utf-8") as rows:
        for line in rows:
            if not line.strip():
                continue
            row = json.loads(line)
            hashes.add(content_hash(row["prompt"]))
            if isinstance(row.get("comparison_id"), int):
                comparisons.add(row["comparison_id"])
    return hashes, comparisons


def prompts_held_out(
    *, project: Project, checkpoint: Checkpoint, baseline_checkpoint: Checkpoint | None = None
) -> HeldOut:
    """The project's prompts that neither ``checkpoint``'s run nor ``baseline_checkpoint``'s
    trained on (a baseline that saw a prompt in training would have an unfair advantage on it).

    Raises TrainingDataMissing when a run's training file is gone (then nobody can tell)."""
    runs = [checkpoint.run]
    if baseline_checkpoint is not None and baseline_checkpoint.run_id != checkpoint.run_id:
        runs.append(baseline_checkpoint.run)
    hashes: set[str] = set()
    comparisons: set[int] = set()
    for run in runs:
        run_hashes, run_comparisons = _trained_rows(run)
        hashes |= run_hashes
        comparisons |= run_comparisons
    # Matched here, not in SQL: a training file may hold more prompts than a query takes values.
    rows = Prompt.objects.filter(project=project).values_list("pk", "content_hash")
    trained = {pk for pk, digest in rows.iterator(chunk_size=5000) if digest in hashes}
    pairs = Comparison.objects.filter(project=project).values_list("pk", "prompt_id")
    trained |= {prompt for pk, prompt in pairs.iterator(chunk_size=5000) if pk in comparisons}
    return HeldOut(
        project=project,
        runs=tuple(runs),
        trained_ids=frozenset(trained),
        n_project=Prompt.objects.filter(project=project).count(),
    )

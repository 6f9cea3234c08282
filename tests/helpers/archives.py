"""Building a project with every kind of history, and measuring it before and after a round trip."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from django.core.management import call_command

from annotation.models import (
    Assignment,
    ClusteringRun,
    Comparison,
    Flag,
    GuidelinesSeen,
    Judgement,
    Project,
    ProjectEvent,
    PromptCluster,
    RepeatJudgement,
    TaskAnswer,
    TaskLease,
)
from annotation.services.adjudication import adjudication_record, guidelines_update
from annotation.services.agreement import project_consensus
from annotation.services.exporting import _sha256_files, _write_files, dataset_export
from common.archive import archive_tables
from monitoring.models import (
    Alert,
    EvalAssignment,
    EvalItem,
    EvalJudgement,
    EvalJudgeVerdict,
    EvalRepeatJudgement,
    EvalRound,
    JudgeOutput,
    StopDecision,
)
from monitoring.services.judges import judge_create
from tests.factories import UserFactory
from training import services as training_services
from training.models import Checkpoint, MetricPoint, RunEvent, RunSample, TrainingRun


def add_annotation_history(project: Project) -> None:
    """Gold on 2 pairs, 2 guideline versions (3 judgements made under the second, with rationales
    and times), a finished gold assignment, a swap repeat, a flag, an adjudication re-decided (a
    superseded verdict and the one pointing at it), a guidelines notice seen, an audit event and a
    clustering with ids in its JSON fields."""
    lead = UserFactory(username="archive-lead-history", role="ML engineer")
    comparisons = list(Comparison.objects.filter(project=project).order_by("pk")[:4])
    Comparison.objects.filter(pk__in=[c.pk for c in comparisons[:2]]).update(gold="a")
    guidelines_update(project=project, text="Prefer correct answers.", user=lead)
    version = guidelines_update(project=project, text="Prefer correct, short answers.", user=lead)
    judged = Judgement.objects.filter(comparison__project=project).order_by("pk")[:3]
    Judgement.objects.filter(pk__in=[j.pk for j in judged]).update(
        guidelines_version=version, rationale="shorter and right", elapsed_ms=4321, shown_left="b"
    )
    first = Judgement.objects.filter(comparison__project=project).order_by("pk").first()
    GuidelinesSeen.objects.create(project=project, annotator=first.annotator, number=version.number)
    Assignment.objects.create(
        comparison=comparisons[0], annotator=first.annotator, kind="gold", status="done",
        shown_left="b", expires_at=first.created_at, finished_at=first.created_at,
    )  # fmt: skip
    RepeatJudgement.objects.create(
        comparison=first.comparison, annotator=first.annotator, choice="b", strength=2,
        shown_left="a", elapsed_ms=999,
    )  # fmt: skip
    Flag.objects.create(comparison=comparisons[2], annotator=first.annotator, reason="unclear")
    adjudication_record(comparison=comparisons[2], decided_by=lead, pick="left", shown_left="a")
    adjudication_record(
        comparison=comparisons[2],
        decided_by=lead,
        pick="right",
        shown_left="a",
        note="on second look",
    )
    ProjectEvent.objects.create(
        project=project, actor=lead, kind="edited", changes={"overlap": {"before": 1, "after": 3}}
    )
    prompt_ids = [c.prompt_id for c in comparisons]
    run = ClusteringRun.objects.create(
        project=project, requested_by=lead, status="succeeded", model_name="tiny", k=2,
        projection={"prompt_ids": prompt_ids, "labels": [0, 0, 1, 1], "x": [0, 1, 2, 3],
                    "y": [0, 1, 0, 1]},
    )  # fmt: skip
    PromptCluster.objects.create(
        run=run, label=0, size=2, share=0.5, central_prompt_ids=prompt_ids[:2]
    )


def add_training_and_eval(project: Project) -> None:
    """A succeeded RM run on the project's export (config, 3 metric points, a checkpoint path, no
    weights), a reward-model judge with verdicts on 2 comparisons (both orders), a 2-item eval round
    rated by one reviewer and judged by the judge, an alert and a stop decision."""
    snapshot = training_services.snapshot_for(export=dataset_export(project=project))
    run = TrainingRun.objects.create(
        name="rm", kind="rm", base_model="smollm2-135m-instruct", snapshot=snapshot,
        config={"max_steps": 3, "learning_rate": 1e-5}, status="succeeded", output_dir="/nowhere",
    )  # fmt: skip
    for step, loss in ((1, 0.69), (2, 0.5), (3, 0.41)):
        MetricPoint.objects.create(run=run, step=step, name="loss", value=loss)
    checkpoint = Checkpoint.objects.create(run=run, step=3, path="/nowhere/step-3", metrics={})
    TrainingRun.objects.filter(pk=run.pk).update(result_checkpoint=checkpoint)
    clone = TrainingRun.objects.create(
        name="rm again", kind="rm", base_model="smollm2-135m-instruct", snapshot=snapshot,
        config={"max_steps": 6}, cloned_from=run,
    )  # fmt: skip
    RunEvent.objects.create(run=clone, action="cloned", detail={"config": {"max_steps": 6}})
    RunSample.objects.create(
        run=run, step=3, position=0, prompt="Hi?", response="Hello.", reward=0.5
    )
    judge = judge_create(
        project=project, name="rm", kind="reward_model", created_by=None, reward_run=run,
        tie_band=0.0,
    )  # fmt: skip
    comparisons = list(Comparison.objects.filter(project=project).order_by("pk")[:2])
    for comparison in comparisons:
        for first in ("a", "b"):
            JudgeOutput.objects.create(
                judge=judge, comparison=comparison, shown_first=first, raw="[[a]]", verdict="a",
                seconds=0.25, score_diff=1.5,
            )  # fmt: skip
    prompts = [c.prompt for c in comparisons]
    round_ = EvalRound.objects.create(
        checkpoint=checkpoint, project=project, baseline_model="smollm2-135m-instruct",
        prompt_ids=[p.pk for p in prompts], size=2, status="open", judge=judge,
    )  # fmt: skip
    reviewer = UserFactory(username="archive-reviewer")
    for position, prompt in enumerate(prompts):
        item = EvalItem.objects.create(
            round=round_, prompt=prompt, position=position, checkpoint_text="ckpt",
            baseline_text="base",
        )  # fmt: skip
        assignment = EvalAssignment.objects.create(
            item=item, reviewer=reviewer, shown_left="checkpoint", status="done"
        )
        EvalJudgement.objects.create(assignment=assignment, preference="a", usefulness=4)
        if position == 0:  # a repeat of the first item, sides flipped, rated one point lower
            repeat = EvalAssignment.objects.create(
                item=item, reviewer=reviewer, shown_left="baseline", kind="repeat", status="done"
            )
            EvalRepeatJudgement.objects.create(assignment=repeat, preference="a", usefulness=3)
        EvalJudgeVerdict.objects.create(
            item=item, judge=judge, shown_first="checkpoint", preference="a", usefulness=4.0,
            seconds=0.5,
        )  # fmt: skip
    Alert.objects.create(
        run=run, metric="loss", value=9.0, threshold=5.0, direction=">", step=2, meaning="high",
        diagnosis="check the data",
    )  # fmt: skip
    StopDecision.objects.create(run=run, round=round_, decision="stop", checkpoint=checkpoint)


def export_hash(project: Project) -> str:
    """The export's SHA-256 (majority consensus, ties dropped), computed afresh from the rows (not
    looked up: ``dataset_export`` returns an existing export with the same hash)."""
    with tempfile.TemporaryDirectory() as folder:
        _write_files(
            project, Path(folder), keep_ties=False, min_judgements=1, consensus_rule="majority"
        )
        return _sha256_files(Path(folder) / "pairs.jsonl", Path(folder) / "judgements.jsonl")


def measures(project: Project) -> dict[str, Any]:
    """Agreement report (the command's JSON), Dawid-Skene consensus by external id, export hash."""
    out = io.StringIO()
    call_command("agreement", "--project", project.slug, "--json", stdout=out)
    ids = dict(Comparison.objects.filter(project=project).values_list("pk", "external_id"))
    consensus = project_consensus(project=project, method="dawid_skene")
    return {
        "report": json.loads(out.getvalue()),
        "consensus": {ids[pk]: value for pk, value in consensus.items()},
        "export_hash": export_hash(project),
    }


def member_digests(path: Path) -> dict[str, str]:
    """SHA-256 of every member but the manifest (which holds the writing time)."""
    with zipfile.ZipFile(path) as zf:
        return {
            n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist() if n != "manifest.json"
        }


def purge(project: Project) -> None:
    """Delete the project with every archived row, in the reverse of the archive's order (so no
    protected reference is left behind): what a fresh instance holds of it, nothing."""
    for table in reversed(archive_tables()):
        rows = table.rows(project)
        self_refs = [
            f.name for f in rows.model._meta.concrete_fields
            if f.is_relation and f.null and f.related_model is rows.model
        ]  # fmt: skip
        if self_refs:  # e.g. a re-adjudication protects the verdict it superseded
            rows.update(**dict.fromkeys(self_refs))
        rows.delete()


def rows_of(project: Project) -> dict[str, int]:
    return {t.model: t.rows(project).count() for t in archive_tables()}


def purge_item_answers() -> None:
    """Delete the answers and leases of the demo's rating and ranking projects, which an archive of
    the pairwise demo does not carry, so the accounts that gave them can be deleted as on a fresh
    instance."""
    TaskAnswer.objects.exclude(item__project__task_type="pairwise").delete()
    TaskLease.objects.exclude(item__project__task_type="pairwise").delete()

"""Writes of an eval round's judge: queue its job once the answers exist, run it (every item of
the round in both orders: the checkpoint's answer shown first, then the baseline's), store its
verdicts.

The job follows the one job lifecycle (``common.lifecycle``) on the round's ``judge_*`` fields: the
task claims it (queued -> running, one conditional update), so a redelivered message that finds it
running or finished does nothing; a heartbeat thread keeps it alive and the reaper fails it if the
worker dies. It is resumable, like a project's judge job: each (item, order) answer is one
``EvalJudgeVerdict`` row under a unique constraint, and a relaunch asks only for the missing ones.
The judge's kind decides how an answer is made through one backend function,
``judge_services.judge_answerer`` (a reward model, a local LLM, or any kind added there), so a new
kind of judge serves rounds without a change here.

A round's pair in the backend's terms: "a" is the checkpoint's answer, "b" the baseline's, so a
verdict "a" is a reviewer's ``EvalJudgement.Preference.CHECKPOINT``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from annotation.models import Prompt
from common.errors import ConcordError
from common.jobs import task_send
from common.lifecycle import FAILED, SUCCEEDED, JobHeartbeat, job_claim, job_finish
from common.text import storable_text
from monitoring.models import EvalAssignment, EvalItem, EvalJudgeVerdict, EvalRound, Judge
from monitoring.models import JudgeStatus as Status
from monitoring.services import judges as judge_services
from monitoring.services.stopping_panel import stopping_inputs_changed

log = logging.getLogger(__name__)
Side = EvalAssignment.Side
# The round's sides as the backend's pair ("a" shown first means the checkpoint was shown first).
STORED = {Side.CHECKPOINT: "a", Side.BASELINE: "b"}
SIDE_OF = {"a": Side.CHECKPOINT, "b": Side.BASELINE}
# Judges that run a model on this machine go to the gpu queue; any other kind (an HTTP endpoint)
# to the default queue.
LOCAL_KINDS = (Judge.Kind.REWARD_MODEL, Judge.Kind.LOCAL_LLM)
GENERATED = (EvalRound.Status.OPEN, EvalRound.Status.CLOSED)
# The round's field that holds its judge job's lifecycle state.
JOB_FIELD = "judge_status"


class RoundJudgeError(ConcordError):
    """A round's judge job that cannot start as asked (the message says why)."""


def _queue(judge: Judge) -> str:
    return (
        settings.CONCORD_GPU_QUEUE
        if judge.kind in LOCAL_KINDS
        else settings.CELERY_TASK_DEFAULT_QUEUE
    )


def round_judge_launch(*, round_: EvalRound) -> EvalRound:
    """Queue the judge's job over the round (after commit): when the answers exist and the job is
    waiting, finished or failed (a relaunch answers only what is missing)."""
    if round_.judge_id is None:
        raise RoundJudgeError(f"round {round_.pk} has no judge")
    startable = [Status.WAITING, Status.SUCCEEDED, Status.FAILED, Status.CANCELLED]
    with transaction.atomic():
        claimed = EvalRound.objects.filter(
            pk=round_.pk, status__in=GENERATED, judge_status__in=startable
        ).update(judge_status=Status.QUEUED, judge_error="", judge_finished_at=None)
        if not claimed:
            round_.refresh_from_db()
            raise RoundJudgeError(
                f"round {round_.pk}'s judge cannot start now: the round is "
                f"{round_.get_status_display().lower()} and its judge job "
                f"{round_.get_judge_status_display().lower()}"
            )
        task_send("monitoring.tasks.judge_round", args=[round_.pk], queue=_queue(round_.judge))
    round_.refresh_from_db()
    return round_


# The judge's error when the round it waits for could not generate its answers.
JUDGE_WITHOUT_ANSWERS = (
    "The round's answers could not be generated (see the round's error), so the judge had "
    "nothing to rate. Create a new round once the cause is fixed."
)


def round_judge_without_answers(*, round_id: int) -> bool:
    """The round's answers could not be generated (its generation failed, or the reaper failed
    it): its judge's job, which waits for them, fails too. False when no judge was waiting."""
    return bool(
        EvalRound.objects.filter(pk=round_id, judge_status=Status.WAITING).update(
            judge_status=Status.FAILED, judge_error=JUDGE_WITHOUT_ANSWERS
        )
    )


@dataclass(frozen=True)
class RoundAnswer:
    """The judge's answer on one item in one order, in the round's terms. preference: "a" the
    checkpoint better, "b" the baseline, "tie", or None when unparsed (``parse_error`` says why);
    usefulness: 1-5 of the checkpoint's answer or None; score_diff: r(checkpoint) - r(baseline)
    for a reward model; seconds: its share of the batch's wall time."""

    item_id: int
    shown_first: str
    raw: str
    preference: str | None
    parse_error: str = ""
    usefulness: float | None = None
    score_diff: float | None = None
    seconds: float = 0.0


def round_judge_run(*, round_id: int) -> EvalRound:
    """Worker side: answer every missing (item, order) of the round with its judge, saving and
    counting progress after each batch. A job that is not queued (a redelivered message: running
    elsewhere, or finished) is left alone; a failure marks the job failed with the error, keeping every
    answer already saved."""
    if not job_claim(model=EvalRound, pk=round_id, status_field=JOB_FIELD):
        return EvalRound.objects.get(pk=round_id)
    round_ = EvalRound.objects.select_related("judge__project", "judge__reward_run").get(
        pk=round_id
    )
    try:
        with JobHeartbeat(model=EvalRound, pk=round_.pk, status_field=JOB_FIELD):
            judge = round_.judge
            tasks = _missing_tasks(round_)
            answer = judge_services.judge_answerer(judge)
            size = judge_services.BATCH.get(judge.kind, 8)
            for start in range(0, len(tasks), size):
                chunk = tasks[start : start + size]
                began = time.perf_counter()
                answers = answer(chunk)
                seconds = (time.perf_counter() - began) / len(chunk)
                round_judge_answers_save(
                    round_=round_,
                    answers=[
                        _round_answer(t, a, seconds) for t, a in zip(chunk, answers, strict=True)
                    ],
                )
        job_finish(model=EvalRound, pk=round_.pk, state=SUCCEEDED, status_field=JOB_FIELD)
    except Exception as exc:
        log.exception("judge of eval round %s failed", round_id)
        job_finish(
            model=EvalRound,
            pk=round_.pk,
            state=FAILED,
            error=f"{type(exc).__name__}: {exc}"[:5000],
            status_field=JOB_FIELD,
        )
    round_.refresh_from_db()
    return round_


def _conversation(prompt: Prompt) -> list[dict[str, str]]:
    if prompt.messages:
        return [{"role": m["role"], "content": m["content"]} for m in prompt.messages]
    return [{"role": "user", "content": prompt.text}]


def _missing_tasks(round_: EvalRound) -> list[judge_services.JudgeTask]:
    """The (item, order) pairs of the round without an answer from its judge, by position then
    order (the checkpoint first); sets the job's total and done counters."""
    items = list(round_.items.select_related("prompt").order_by("position"))
    answered = set(
        EvalJudgeVerdict.objects.filter(item__round=round_, judge_id=round_.judge_id).values_list(
            "item_id", "shown_first"
        )
    )
    EvalRound.objects.filter(pk=round_.pk).update(
        judge_total=2 * len(items), judge_done=len(answered)
    )
    tasks = []
    for item in items:
        texts = {"a": item.checkpoint_text, "b": item.baseline_text}
        for side in (Side.CHECKPOINT, Side.BASELINE):
            if (item.pk, side) in answered:
                continue
            first = STORED[side]
            second = "b" if first == "a" else "a"
            tasks.append(
                judge_services.JudgeTask(
                    item.pk, first, _conversation(item.prompt), texts[first], texts[second]
                )
            )
    return tasks


def _round_answer(
    task: judge_services.JudgeTask, answer: judge_services.Answer, seconds: float
) -> RoundAnswer:
    raw, verdict, error, usefulness, diff = answer
    side = SIDE_OF[task.shown_first]
    return RoundAnswer(
        item_id=task.comparison_id,
        shown_first=side,
        raw=raw,
        preference=verdict,
        parse_error="" if verdict else (error or "no verdict"),
        # The template rates Response A: the checkpoint's answer only when it was shown first.
        usefulness=usefulness if side == Side.CHECKPOINT else None,
        score_diff=diff,
        seconds=seconds,
    )


def round_judge_answers_save(*, round_: EvalRound, answers: Sequence[RoundAnswer]) -> int:
    """Store the judge's answers on items of the round (an answer already stored for its item and
    order is kept, never rewritten) and count the job's progress. Bad input changes nothing: every
    item must be the round's, every order "checkpoint" or "baseline", a preference "a", "b", "tie"
    or None, a usefulness 1-5 or None. The raw answer is stored with ``storable_text`` (a NUL a
    model wrote becomes U+FFFD). Returns how many (item, order) answers the round now has."""
    if round_.judge_id is None:
        raise RoundJudgeError(f"round {round_.pk} has no judge")
    own = set(EvalItem.objects.filter(round=round_).values_list("pk", flat=True))
    for answer in answers:
        if answer.item_id not in own:
            raise RoundJudgeError(f"item {answer.item_id} is not an item of round {round_.pk}")
        if answer.shown_first not in Side.values:
            raise RoundJudgeError(f"shown_first must be one of {Side.values}")
        if answer.preference not in ("a", "b", "tie", None):
            raise RoundJudgeError(
                f"preference must be a, b, tie or None, got {answer.preference!r}"
            )
        if answer.usefulness is not None and not 1 <= answer.usefulness <= 5:
            raise RoundJudgeError(f"usefulness must be from 1 to 5, got {answer.usefulness}")
    rows = [
        EvalJudgeVerdict(
            item_id=a.item_id,
            judge_id=round_.judge_id,
            shown_first=a.shown_first,
            preference=a.preference or "",
            parse_error="" if a.preference else storable_text(a.parse_error or "no verdict")[:300],
            usefulness=a.usefulness,
            raw=storable_text(a.raw),
            score_diff=a.score_diff,
            seconds=a.seconds,
        )
        for a in answers
    ]
    with transaction.atomic():
        EvalJudgeVerdict.objects.bulk_create(rows, ignore_conflicts=True)
        done = EvalJudgeVerdict.objects.filter(item__round=round_, judge_id=round_.judge_id).count()
        EvalRound.objects.filter(pk=round_.pk).update(judge_done=done, judge_total=2 * len(own))
    stopping_inputs_changed(round_.checkpoint.run_id)
    return done

"""Writes of human-eval rounds: create a round, generate its responses (gpu worker), hand items to
reviewers, submit judgements, record the stop / continue / roll-back decision.

Eval rounds run on the shared work queue (annotation.work_queue), as labelling does: the claims,
the expiry of unanswered assignments and the counterbalanced sides are
``monitoring.services.eval_queue``'s (the queue's ``claims.slot_claim`` and ``policy.side_for``),
and the answer is validated by the ``eval_rating`` task type (monitoring.eval_rating), which
MonitoringConfig.ready registers with the queue.

Assignment: an item goes to ``reviewers_per_item`` distinct reviewers (a unique constraint on (item,
reviewer, kind) makes a second rating by the same person impossible; a repeat, sides flipped, is
a repeat judgement kept out of the results). A reviewer may skip an item (``eval_skip``): it goes
to someone else. Sides are counterbalanced: the k-th
reviewer of item i sees the checkpoint on the left when (i + k) is even, so each item and the round
as a whole show the checkpoint on both sides about equally, and no reviewer can learn a fixed side.
An item whose two answers are identical (``eval_selectors.answers_identical``) is never handed out:
it counts as ties. A round with a judge hands out only the items drawn for reviewers
(``EvalItem.for_humans``); the judge rates them all once the answers exist
(monitoring/services/round_judges.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from annotation.models import Project, Prompt
from annotation.selectors.clustering import prompt_ids_held_out
from annotation.work_queue.plugins import AnswerError
from annotation.work_queue.registry import task_type_named
from common.errors import ConcordError
from common.jobs import task_send
from common.lifecycle import FAILED, SUCCEEDED, JobHeartbeat, job_claim, job_finish
from common.text import storable_text
from monitoring.eval_rating import EVAL_RATING_NAME, assignment_order
from monitoring.models import (
    EvalAssignment,
    EvalItem,
    EvalJudgement,
    EvalRepeatJudgement,
    EvalRound,
    Judge,
    JudgeStatus,
    StopDecision,
)
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.selectors import prompts as prompt_selectors
from monitoring.selectors import round_judges as ppi_selectors
from monitoring.selectors.round_judges import DEFAULT_KAPPA_THRESHOLD
from monitoring.services import eval_queue
from monitoring.services import round_judges as round_judge_services
from monitoring.services.stopping_panel import stopping_inputs_changed
from monitoring.stats import win_rates
from monitoring.stats.ppi import human_subset
from training import services as training_services
from training.models import Checkpoint, TrainingRun

log = logging.getLogger(__name__)
DEFAULT_SAMPLING = {"max_new_tokens": 256, "temperature": 0.7, "top_p": 0.9, "seed": 0}
# A repeat at most every this many items (a round setting; larger would hardly ever repeat).
MAX_REPEAT_EVERY = 1000


class EvalError(ConcordError):
    """An eval action that does not fit the round's state or input (the message says why)."""


def round_create(
    *,
    checkpoint: Checkpoint,
    project: Project,
    size: int,
    created_by: AbstractBaseUser | None,
    baseline_model: str = "",
    baseline_checkpoint: Checkpoint | None = None,
    reviewers_per_item: int = 3,
    repeat_every: int = 0,
    ci_width: float = 0.1,
    sampling: Mapping[str, Any] | None = None,
    seed: int = 0,
    judge: Judge | None = None,
    human_fraction: float = 1.0,
    min_human_items: int = 20,
    endpoint: Mapping[str, Any] | None = None,
    enqueue: bool = True,
) -> EvalRound:
    """A round on ``size`` held-out prompts of ``project`` stratified by cluster (frozen now), its
    items created empty. Held out: prompts neither the checkpoint's run nor the baseline
    checkpoint's trained on (``prompt_selectors.prompts_held_out``); asking for more than there
    are is refused with the number there are. Generation is queued after commit: on the gpu
    queue (in-process, the default), or, when ``endpoint`` is given, on the default queue, through
    an OpenAI-compatible
    server (``ENDPOINT_KEYS``: base_url, checkpoint_model, baseline_model, and optionally
    baseline_base_url when another server serves the baseline, api_key_env, max_concurrency,
    timeout_s).

    The round stores the sample size a win rate interval of width ``ci_width`` needs
    (``win_rates.sample_size_for_width``), so the page can say whether ``size`` is enough.

    ``judge``: a model judge of ``project`` that rates every item once the answers exist
    (``round_judge_services.round_judge_launch``); reviewers then rate only ``ppi.human_subset``'s seeded
    random ``human_fraction`` of the items (at least ``min_human_items``, >= 2), each item keeping
    its inclusion probability. Without a judge reviewers rate every item (fraction 1).

    ``repeat_every``: every n-th item a reviewer is given repeats one they rated a while ago,
    sides flipped, for their self-consistency (``eval_queue``); 0, the default: no repeats.

    The checkpoints must be a policy's (a reward model's answers no prompt) and, when generated
    in-process, still on disk (``Checkpoint.on_disk``): EvalError, nothing written, otherwise.
    """
    if bool(baseline_model) == (baseline_checkpoint is not None):
        raise EvalError("give exactly one baseline: a registry model name or an earlier checkpoint")
    for tested in (checkpoint, baseline_checkpoint):
        if tested is not None and tested.run.kind == TrainingRun.Kind.RM:
            raise EvalError(
                f"the checkpoint of step {tested.step} of run #{tested.run_id} is a reward "
                "model's: it scores answers but writes none, so a human-eval round cannot judge "
                "it; choose a checkpoint of a policy run"
            )
        if tested is not None and not endpoint and not tested.on_disk:
            raise EvalError(tested.missing_text)
    if baseline_checkpoint is not None and baseline_checkpoint.pk == checkpoint.pk:
        raise EvalError("the baseline checkpoint must differ from the checkpoint under test")
    if size < 1:
        raise EvalError(f"size must be at least 1, got {size}")
    if reviewers_per_item < 1:
        raise EvalError(f"reviewers_per_item must be at least 1, got {reviewers_per_item}")
    if not 0 <= repeat_every <= MAX_REPEAT_EVERY:
        raise EvalError(
            f"repeat_every must be 0 (no repeats) to {MAX_REPEAT_EVERY}, got {repeat_every}"
        )
    _check_round_judge(project, judge, human_fraction, min_human_items)
    hint = win_rates.sample_size_for_width(ci_width)  # raises ValueError on a bad width
    config = {**DEFAULT_SAMPLING, **(sampling or {})}
    _sampling_config(config)  # reject bad sampling settings before anything is written
    endpoint = dict(endpoint or {})
    if endpoint:
        _endpoint_configs(endpoint)  # reject a bad endpoint before anything is written
    prompt_ids = _held_out_prompt_ids(project, checkpoint, baseline_checkpoint, size, seed)
    with transaction.atomic():
        round_ = EvalRound.objects.create(
            checkpoint=checkpoint,
            project=project,
            baseline_model=baseline_model,
            baseline_checkpoint=baseline_checkpoint,
            prompt_ids=prompt_ids,
            size=len(prompt_ids),
            reviewers_per_item=reviewers_per_item,
            repeat_every=repeat_every,
            ci_width=ci_width,
            sample_size_hint=hint,
            sampling=config,
            endpoint=endpoint,
            seed=seed,
            answers_total=2 * len(prompt_ids),
            judge=judge,
            human_fraction=human_fraction,
            min_human_items=min_human_items,
            judge_status=JudgeStatus.WAITING if judge else JudgeStatus.NONE,
            created_by=created_by,
        )
        chosen, probability = human_subset(
            len(prompt_ids), fraction=human_fraction, minimum=min_human_items, seed=seed
        )
        EvalItem.objects.bulk_create(
            EvalItem(
                round=round_,
                prompt_id=pid,
                position=k,
                for_humans=bool(chosen[k]),
                inclusion_probability=probability,
            )
            for k, pid in enumerate(prompt_ids)
        )
        if enqueue:
            task_send(
                "monitoring.tasks.generate_round_responses",
                args=[round_.pk],
                queue=settings.CELERY_TASK_DEFAULT_QUEUE
                if endpoint
                else settings.CONCORD_GPU_QUEUE,
            )
    return round_


def _held_out_prompt_ids(
    project: Project,
    checkpoint: Checkpoint,
    baseline_checkpoint: Checkpoint | None,
    size: int,
    seed: int,
) -> list[int]:
    """``size`` prompts of the project neither model trained on, stratified by cluster, or
    EvalError saying how many there are."""
    try:
        held_out = prompt_selectors.prompts_held_out(
            project=project, checkpoint=checkpoint, baseline_checkpoint=baseline_checkpoint
        )
    except prompt_selectors.TrainingDataMissing as exc:
        raise EvalError(str(exc)) from exc
    if held_out.n_available == 0:
        raise EvalError(held_out.message())
    if size > held_out.n_available:
        raise EvalError(f"{size} prompts asked for. {held_out.message()}")
    return prompt_ids_held_out(
        project=project, size=size, seed=seed, exclude=sorted(held_out.trained_ids)
    )


def _check_round_judge(
    project: Project, judge: Judge | None, human_fraction: float, min_human_items: int
) -> None:
    if judge is not None and judge.project_id != project.pk:
        raise EvalError(
            f"judge {judge.name} v{judge.version} belongs to project {judge.project.slug!r}, "
            f"not to {project.slug!r}"
        )
    if not 0 < human_fraction <= 1:
        raise EvalError(f"human_fraction must be in (0, 1], got {human_fraction}")
    if judge is None and human_fraction != 1:
        raise EvalError("only a round with a judge sends reviewers a subset (human_fraction < 1)")
    if min_human_items < 2:
        raise EvalError(f"min_human_items must be at least 2, got {min_human_items}")


def _sampling_config(config: Mapping[str, Any]):
    from training.inference.generation import SamplingConfig  # pure dataclass module; torch lazily

    try:
        return SamplingConfig(**config)
    except (TypeError, ValueError) as exc:
        raise EvalError(f"sampling: {exc}") from exc


ENDPOINT_KEYS = (
    "base_url", "checkpoint_model", "baseline_model", "baseline_base_url", "api_key_env",
    "max_concurrency", "timeout_s",
)  # fmt: skip


def _endpoint_configs(endpoint: Mapping[str, Any]):
    """The (checkpoint, baseline) ``EndpointConfig`` of a round's endpoint settings, or EvalError
    naming what is wrong."""
    from training.inference.chat_client import EndpointConfig  # stdlib only; no torch

    unknown = sorted(set(endpoint) - set(ENDPOINT_KEYS))
    if unknown:
        raise EvalError(f"endpoint: unknown settings {unknown}; known: {list(ENDPOINT_KEYS)}")
    shared = {
        "base_url": str(endpoint.get("base_url", "")).strip(),
        "api_key_env": endpoint.get("api_key_env", ""),
        "max_concurrency": endpoint.get("max_concurrency", 4),
        "timeout_s": endpoint.get("timeout_s", 120.0),
    }
    configs = []
    for side in ("checkpoint", "baseline"):
        # Two full models usually need two servers: the baseline may have a URL of its own.
        url = endpoint.get("baseline_base_url") if side == "baseline" else None
        try:
            configs.append(
                EndpointConfig(
                    model=endpoint.get(f"{side}_model", ""),
                    **{**shared, "base_url": str(url or shared["base_url"]).strip()},
                )
            )
        except (AttributeError, TypeError, ValueError) as exc:  # a number where text belongs...
            raise EvalError(f"endpoint ({side}): {exc}") from exc
    return tuple(configs)


def _conversation(prompt: Prompt) -> list[dict[str, str]]:
    if prompt.messages:
        return [{"role": m["role"], "content": m["content"]} for m in prompt.messages]
    return [{"role": "user", "content": prompt.text}]


def _baseline_dir(round_: EvalRound) -> str:
    if round_.baseline_checkpoint_id:
        return round_.baseline_checkpoint.path
    from common.model_registry import model_path

    return str(model_path(round_.baseline_model))


GENERATION = "generation_status"  # the round's generation job's state (``status`` is the round's)


def round_generate(*, round_id: int, worker: str | None = None) -> EvalRound:
    """Worker side: generate both models' responses and open the round, in-process with the chat
    template (gpu queue) or through the round's endpoint (default queue), counting the answers
    done (``answers_done`` of ``answers_total``) as it goes. The generation job follows the one
    job lifecycle: a redelivered message that finds it running or finished does nothing. A
    failure marks it and the round failed, and its judge's job, which waits for the answers,
    failed too. Answers are stored with ``storable_text`` (a NUL becomes U+FFFD)."""
    if not job_claim(model=EvalRound, pk=round_id, worker=worker, status_field=GENERATION):
        return EvalRound.objects.get(pk=round_id)
    round_ = EvalRound.objects.select_related(
        "checkpoint__run__reward_model_run", "baseline_checkpoint"
    ).get(pk=round_id)
    try:
        with JobHeartbeat(model=EvalRound, pk=round_.pk, status_field=GENERATION):
            items = list(round_.items.select_related("prompt").order_by("position"))
            conversations = [_conversation(item.prompt) for item in items]
            config = _sampling_config(round_.sampling)
            EvalRound.objects.filter(pk=round_.pk).update(
                answers_done=0, answers_total=2 * len(items)
            )
            if round_.endpoint:
                outputs = _generate_through_endpoint(round_, conversations, config)
            else:
                outputs = _generate_in_process(round_, conversations, config)
            for item, mine, theirs in zip(
                items, outputs["checkpoint"], outputs["baseline"], strict=True
            ):
                item.checkpoint_text, item.checkpoint_tokens = (
                    storable_text(mine.text),
                    mine.n_tokens,
                )
                item.baseline_text, item.baseline_tokens = (
                    storable_text(theirs.text),
                    theirs.n_tokens,
                )
            scores = _reward_scores_for(round_, conversations, [i.checkpoint_text for i in items])
        for item, score in zip(items, scores, strict=False):
            item.reward_score = score
        with transaction.atomic():
            EvalItem.objects.bulk_update(
                items,
                ["checkpoint_text", "checkpoint_tokens", "baseline_text", "baseline_tokens"]
                + (["reward_score"] if scores else []),
            )
            if not job_finish(
                model=EvalRound, pk=round_.pk, state=SUCCEEDED, status_field=GENERATION,
                updates={"status": EvalRound.Status.OPEN},
            ):  # fmt: skip
                raise EvalError(f"the generation of round {round_.pk} was stopped (reaped)")
    except Exception as exc:
        log.exception("generation of eval round %s failed", round_id)
        # Our own refusals read as a sentence; anything else keeps its type for the engineer.
        error = str(exc) if isinstance(exc, EvalError) else f"{type(exc).__name__}: {exc}"
        with transaction.atomic():
            if job_finish(
                model=EvalRound, pk=round_.pk, state=FAILED, error=error[:5000],
                status_field=GENERATION, updates={"status": EvalRound.Status.FAILED},
            ):  # fmt: skip
                round_judge_services.round_judge_without_answers(round_id=round_.pk)
    else:
        _close_when_rated(round_id=round_.pk)  # every answer identical: nothing to rate
        if round_.judge_id:
            round_.refresh_from_db()
            try:
                round_judge_services.round_judge_launch(round_=round_)
            except round_judge_services.RoundJudgeError:
                # Launched already: the page can relaunch.
                log.warning("the judge of eval round %s was not launched", round_.pk)
    round_.refresh_from_db()
    return round_


def _answers_counter(round_: EvalRound, offset: int):
    """A progress callback: ``done`` answers of one side (after ``offset`` of the sides before)."""

    def count(done: int) -> None:
        EvalRound.objects.filter(pk=round_.pk).update(answers_done=offset + done)

    return count


def _generate_in_process(round_: EvalRound, conversations, config) -> dict[str, list]:
    """Both sides' ``Generation``s with the models loaded here, one after the other."""
    from training.inference.generation import ChatGenerator

    for checkpoint in (round_.checkpoint, round_.baseline_checkpoint):
        if checkpoint is not None and not checkpoint.on_disk:
            raise EvalError(checkpoint.missing_text)  # pruned after the round was created
    outputs = {}
    sides = (("checkpoint", round_.checkpoint.path), ("baseline", _baseline_dir(round_)))
    for k, (side, folder) in enumerate(sides):
        generator = ChatGenerator(folder, engine=settings.CONCORD_GENERATION_ENGINE)
        outputs[side] = generator.generate(
            conversations, config, progress=_answers_counter(round_, k * len(conversations))
        )
        del generator
    return outputs


# Conversations sent to an endpoint between two progress counts (each chunk runs at the endpoint's
# max_concurrency; an answer depends on its conversation alone, so chunking changes no answer).
ENDPOINT_CHUNK = 32


def _generate_through_endpoint(round_: EvalRound, conversations, config) -> dict[str, list]:
    """Both sides' ``Completion``s (text and token count, as the server counted) from the served
    models. The server applies its model's chat template; repetition_penalty is not part of the
    OpenAI API and is not sent."""
    from training.inference.chat_client import ChatClient

    outputs: dict[str, list] = {}
    for k, (side, endpoint) in enumerate(
        zip(("checkpoint", "baseline"), _endpoint_configs(round_.endpoint), strict=True)
    ):
        client, count = ChatClient(endpoint), _answers_counter(round_, k * len(conversations))
        outputs[side] = []
        for start in range(0, len(conversations), ENDPOINT_CHUNK):
            outputs[side] += client.completions(
                conversations[start : start + ENDPOINT_CHUNK],
                max_tokens=config.max_new_tokens,
                temperature=config.temperature,
                top_p=config.top_p,
                seed=config.seed,
            )
            count(len(outputs[side]))
    return outputs


def _reward_scores_for(
    round_: EvalRound, conversations: list[list[dict[str, str]]], texts: list[str]
) -> list[float]:
    """The run's reward model's scores of the checkpoint's responses (for the hacking check); none
    when the run has no reward model or scoring fails (the round still opens)."""
    reward_run = round_.checkpoint.run.reward_model_run
    if reward_run is None:
        return []
    folder = Path(reward_run.output_dir) / "final"
    try:
        from training.recipes import reward_scores  # worker code path: loads torch

        return reward_scores(folder, conversations, texts)
    except Exception:
        log.exception("reward scoring of eval round %s failed; the round opens without", round_.pk)
        return []


def eval_claim_next(*, reviewer: AbstractBaseUser, round_: EvalRound) -> EvalAssignment | None:
    """The reviewer's unanswered assignment in the open round, else a newly claimed item (short of
    reviewers, never one this reviewer already has, never one whose two answers are identical);
    None when nothing is left for them or the round is not open (``eval_queue``: the shared work
    queue's claim)."""
    if round_.status != EvalRound.Status.OPEN:
        return None
    return eval_queue.assignment_claim(reviewer=reviewer, round_=round_)


def eval_submit(
    *,
    assignment: EvalAssignment,
    reviewer: AbstractBaseUser,
    pick: str,
    usefulness: int,
    note: str = "",
    elapsed_ms: int = 0,
) -> EvalJudgement | EvalRepeatJudgement:
    """Record the reviewer's verdict, validated by the ``eval_rating`` task type
    (monitoring.eval_rating). ``pick`` speaks of the screen (left, right, tie); it is stored from
    the checkpoint's side (a = checkpoint better, b = baseline better). The verdict on a repeat
    is an EvalRepeatJudgement (the round's results count the first one only). EvalError, nothing
    written, for a refused answer, a closed round, or an assignment no longer the reviewer's (an
    unanswered one released after ``eval_queue.LEASE``, or skipped)."""
    if assignment.reviewer_id != reviewer.pk:
        raise EvalError("this item was handed to another reviewer")
    round_ = assignment.item.round
    if round_.status != EvalRound.Status.OPEN:
        raise EvalError("this round is closed: it takes no more ratings")
    answer = {"pick": pick, "usefulness": usefulness}
    try:
        fields = task_type_named(EVAL_RATING_NAME).validate(
            round_.project, answer, assignment_order(assignment.shown_left)
        )
    except AnswerError as exc:
        raise EvalError(str(exc)) from exc
    elapsed_ms = max(0, min(int(elapsed_ms), 86_400_000))
    repeat = assignment.kind == EvalAssignment.Kind.REPEAT
    try:
        with transaction.atomic():
            # Locked, so the release of stale assignments leaves it alone until we commit.
            held = EvalAssignment.objects.select_for_update().filter(pk=assignment.pk)
            if not held.exclude(status=EvalAssignment.Status.SKIPPED).exists():
                raise EvalError("this item is no longer assigned to you; the next one is loaded")
            if repeat:
                judgement = EvalRepeatJudgement.objects.create(
                    assignment=assignment, **fields, elapsed_ms=elapsed_ms
                )
            else:
                judgement = EvalJudgement.objects.create(
                    assignment=assignment, **fields, note=note.strip()[:5000], elapsed_ms=elapsed_ms
                )
            held.update(status=EvalAssignment.Status.DONE, finished_at=timezone.now())
    except IntegrityError as exc:
        raise EvalError("this item has already been rated") from exc
    if not repeat:
        _close_when_rated(round_id=round_.pk)
        stopping_inputs_changed(round_.checkpoint.run_id)
    return judgement


def eval_skip(*, reviewer: AbstractBaseUser, assignment: EvalAssignment) -> None:
    """The reviewer skips their active assignment unanswered: the item goes back to the pool
    for other reviewers and is not shown to them again (``eval_queue.assignment_skip``). EvalError
    for an assignment no longer theirs (answered, skipped or released)."""
    if assignment.item.round.status != EvalRound.Status.OPEN:
        raise EvalError("this round is closed: nothing to skip")
    if not eval_queue.assignment_skip(reviewer=reviewer, assignment_id=assignment.pk):
        raise EvalError("this item is no longer assigned to you; the next one is loaded")


def _close_when_rated(*, round_id: int) -> None:
    """Close an open round once every rateable item has its ``reviewers_per_item`` ratings (items
    with identical answers need none: they count as ties): nothing is left to hand out, and the
    results are final. A round whose answers are all identical closes as soon as it opens."""
    round_ = EvalRound.objects.get(pk=round_id)
    short = (
        eval_selectors.rateable_items(round_)
        .annotate(rated=Count("assignments__judgement"))
        .filter(rated__lt=round_.reviewers_per_item)
    )
    if round_.status == EvalRound.Status.OPEN and not short.exists():
        round_close(round_=round_)


def round_close(*, round_: EvalRound) -> EvalRound:
    """No more ratings: close an open round."""
    EvalRound.objects.filter(pk=round_.pk, status=EvalRound.Status.OPEN).update(
        status=EvalRound.Status.CLOSED
    )
    round_.refresh_from_db()
    return round_


@transaction.atomic
def decision_record(
    *,
    run: TrainingRun,
    decision: str,
    reviewer: AbstractBaseUser | None,
    note: str = "",
    checkpoint: Checkpoint | None = None,
    round_: EvalRound | None = None,
    kappa_threshold: float = DEFAULT_KAPPA_THRESHOLD,
) -> StopDecision:
    """Record stop / continue / roll back / reject. "stop" cancels a run that is still going (it
    stops at its next step with a checkpoint); "rollback" marks ``checkpoint`` as the run's result;
    "reject" cancels a run that is still going and marks its base model as the result (no
    checkpoint of it is kept: the stopping panel's advice when every rated checkpoint loses to the
    base). A later roll back replaces a rejection, and a later rejection a roll back.

    With a rated ``round_`` the decision keeps the estimates the panel showed for it with the
    reviewer's ``kappa_threshold`` (``ppi_selectors.round_panel_estimates``): ``estimate_source``
    is the usefulness criterion's (human or ppi), ``estimate`` every figure and the reason."""
    if decision not in StopDecision.Decision.values:
        raise EvalError(f"decision must be one of {StopDecision.Decision.values}, got {decision!r}")
    if decision == StopDecision.Decision.ROLLBACK:
        if checkpoint is None:
            raise EvalError("a roll back needs the checkpoint to roll back to")
        if checkpoint.run_id != run.pk:
            raise EvalError(f"checkpoint {checkpoint.pk} does not belong to run #{run.pk}")
        if not checkpoint.on_disk:
            raise EvalError(checkpoint.missing_text)
    elif checkpoint is not None:
        raise EvalError(
            "only a roll back names a checkpoint; a rejection keeps the base model"
            if decision == StopDecision.Decision.REJECT
            else "only a roll back names a checkpoint"
        )
    if round_ is not None and round_.checkpoint.run_id != run.pk:
        raise EvalError(f"round {round_.pk} evaluates another run")
    if not -1 <= kappa_threshold <= 1:
        raise EvalError(f"kappa_threshold must be a kappa in [-1, 1], got {kappa_threshold}")
    source, estimate = "", {}
    if round_ is not None and eval_selectors.round_outcomes(round_).n_ratings:
        shown = ppi_selectors.round_panel_estimates(round_, kappa_threshold=kappa_threshold)
        source = shown["usefulness"].source
        estimate = {
            "round": round_.pk,
            "kappa_threshold": kappa_threshold,
            "usefulness": ppi_selectors.estimate_record(shown["usefulness"]),
            "win_rate": ppi_selectors.estimate_record(shown["win_rate"]),
        }
    made = StopDecision.objects.create(
        run=run, round=round_, decision=decision, checkpoint=checkpoint, note=note.strip(),
        reviewer=reviewer, estimate_source=source, estimate=estimate,
    )  # fmt: skip
    active = (TrainingRun.Status.DRAFT, TrainingRun.Status.QUEUED, TrainingRun.Status.RUNNING)
    ends = (StopDecision.Decision.STOP, StopDecision.Decision.REJECT)
    if decision in ends and run.status in active:
        training_services.run_cancel(run=run, user=reviewer)
    if decision in (StopDecision.Decision.ROLLBACK, StopDecision.Decision.REJECT):
        TrainingRun.objects.filter(pk=run.pk).update(
            result_checkpoint=checkpoint, result_is_base=decision == StopDecision.Decision.REJECT
        )
        run.refresh_from_db()
    return made

"""Writes of model judges: create a judge version with its machine annotator, launch its job, and
run the job: every comparison of the project judged in both orders. Local models (a reward model, a
registry LLM) run on the gpu worker; an OpenAI-compatible endpoint only needs HTTP, so its job runs on
the default queue. The kinds differ only in how they turn tasks into answers (``_answerer``).

A judge's job follows the one job lifecycle (``common.lifecycle``): the task claims it (queued ->
running, one conditional update), so a redelivered message (late ack) that finds it running or
finished does nothing; a heartbeat thread keeps it alive and the reaper fails it if the worker dies.
It is resumable: each (comparison, order) answer is one ``JudgeOutput`` row under a unique
constraint, and a relaunched job skips the pairs it already answered. After the answers, the
combined verdict per comparison (``combine_orders``' rule: both orders agree, else a tie) is stored
as a ``Judgement`` of the judge's machine annotator, so every agreement statistic can treat the
judge like a person.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Max
from django.utils.text import slugify

from annotation.agreement import CHOICES, MISSING
from annotation.agreement.judges import (
    calibrate_tie_band,
    combine_orders,
    reward_verdicts,
    verdicts_from_rows,
)
from annotation.models import Comparison, Judgement, Project
from common.errors import ConcordError
from common.jobs import task_send
from common.lifecycle import (
    CANCELLED,
    FAILED,
    SUCCEEDED,
    JobHeartbeat,
    job_claim,
    job_finish,
)
from common.model_registry import model_get
from common.roles import machine_account_mark
from common.text import storable_text
from monitoring.models import Judge, JudgeOutput
from monitoring.stats.judging import (
    DEFAULT_TEMPLATE,
    JudgingTemplate,
    Unparsed,
    asks_for_usefulness,
)
from training.models import TrainingRun

log = logging.getLogger(__name__)
ORDERS = ("a", "b")  # the stored response shown first, as "Response A"
# Answers per batch; the job saves and reports progress after each. A reward model's batch is
# larger: each batch loads the scorer again (training.recipes.reward_scores).
# An endpoint's batch is sent through the client's thread pool (its max_concurrency in flight).
BATCH = {"local_llm": 8, "reward_model": 128, "openai": 32}


class JudgeError(ConcordError):
    """A judge that cannot be created or run as asked (the message says why)."""


def _machine_username(project: Project, name: str, version: int) -> str:
    # Never a valid login name of a person: the form's validators reject the colons.
    return f"judge:{project.slug}:{name}:v{version}"[:150]


def judge_create(
    *,
    project: Project,
    name: str,
    kind: str,
    created_by: AbstractBaseUser | None,
    reward_run: TrainingRun | None = None,
    tie_band: float | None = None,
    model_name: str = "",
    template: str = DEFAULT_TEMPLATE,
    max_new_tokens: int = 256,
    endpoint_url: str = "",
    api_key_env: str = "",
    max_concurrency: int = 4,
    timeout_s: float = 60.0,
    description: str = "",
) -> Judge:
    """The next version of the judge ``name`` of ``project`` (version 1 for a new name), with a
    machine annotator that cannot log in. Nothing is written when an argument is wrong.

    kind "reward_model" needs ``reward_run``: a succeeded reward-model run (of this project, or of
    another one: a reward model trained on other data is measured here on held-out pairs);
    ``tie_band`` (reward units, >= 0) or None to calibrate it on the humans' labels when the job
    runs. kind "local_llm" needs ``model_name`` (a ready model of the registry), a ``template``
    with {prompt}, {response_a}, {response_b} (``monitoring.stats.judging.JudgingTemplate``) and
    ``max_new_tokens`` >= 1; it generates greedily. kind "openai" needs the same template and
    ``max_new_tokens``, ``endpoint_url`` (the API's base URL, e.g. http://host:8000/v1) and
    ``model_name`` (the served model's name); ``api_key_env`` names the worker's environment
    variable holding the key (never the key), ``max_concurrency`` caps requests in flight and
    ``timeout_s`` bounds each one (``training.inference.chat_client.EndpointConfig`` checks them).
    kind "imported" needs only ``description`` (whose verdicts, from where); it has no job, its
    verdicts come from a file (``monitoring.services.judge_imports.judge_verdicts_import``).
    """
    if not name or slugify(name) != name:
        raise JudgeError(f"name {name!r} must be a slug (lowercase letters, digits, hyphens)")
    if kind == Judge.Kind.REWARD_MODEL:
        _check_reward_run(reward_run)
        if tie_band is not None and not tie_band >= 0:
            raise JudgeError(f"tie_band must be >= 0 reward units, got {tie_band}")
        model_name, template = "", ""
    elif kind in (Judge.Kind.LOCAL_LLM, Judge.Kind.OPENAI):
        if kind == Judge.Kind.LOCAL_LLM:
            entry = model_get(model_name)  # ModelUnavailableError names the known models
            if not entry.ready:
                raise JudgeError(f"model {model_name!r} is not on this machine: {entry.how_to_get}")
            endpoint_url, api_key_env = "", ""
        else:
            _endpoint_config(endpoint_url, model_name, api_key_env, max_concurrency, timeout_s)
        try:
            JudgingTemplate(template)
        except ValueError as exc:
            raise JudgeError(str(exc)) from exc
        if max_new_tokens < 1:
            raise JudgeError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        reward_run, tie_band = None, None
    elif kind == Judge.Kind.IMPORTED:
        if not description.strip():
            raise JudgeError(
                "an imported judge needs a description of where its verdicts come from"
            )
        reward_run, tie_band, model_name, template = None, None, "", ""
    else:
        raise JudgeError(f"kind must be one of {', '.join(Judge.Kind.values)}, got {kind!r}")
    with transaction.atomic():
        # Lock the project row so two creations of one name cannot pick the same version.
        Project.objects.select_for_update().get(pk=project.pk)
        last = Judge.objects.filter(project=project, name=name).aggregate(v=Max("version"))["v"]
        version = (last or 0) + 1
        machine = get_user_model().objects.create_user(
            username=_machine_username(project, name, version), is_active=False
        )
        machine.set_unusable_password()
        machine.save(update_fields=["password"])
        machine_account_mark(user=machine)  # never counted, listed or shown as a person
        return Judge.objects.create(
            project=project,
            name=name,
            version=version,
            kind=kind,
            reward_run=reward_run,
            tie_band=tie_band,
            model_name=model_name,
            template=template,
            max_new_tokens=max_new_tokens,
            endpoint_url=endpoint_url,
            api_key_env=api_key_env,
            max_concurrency=max_concurrency,
            timeout_s=timeout_s,
            description=description.strip() if kind == Judge.Kind.IMPORTED else "",
            annotator=machine,
            created_by=created_by,
        )


def _endpoint_config(url: str, model: str, api_key_env: str, concurrency: int, timeout_s: float):
    """The judge's ``EndpointConfig``, or JudgeError naming the field that is wrong."""
    from training.inference.chat_client import EndpointConfig  # stdlib only; no torch

    try:
        return EndpointConfig(
            base_url=url.strip(),
            model=model,
            api_key_env=api_key_env,
            max_concurrency=concurrency,
            timeout_s=timeout_s,
        )
    except ValueError as exc:
        raise JudgeError(f"endpoint: {exc}") from exc


def _check_reward_run(run: TrainingRun | None) -> None:
    if run is None:
        raise JudgeError("a reward-model judge needs a reward-model run")
    if run.kind != TrainingRun.Kind.RM or run.status != TrainingRun.Status.SUCCEEDED:
        raise JudgeError(
            f"run {run.pk} is a {run.kind} run ({run.status}); need a succeeded rm run"
        )


def judge_launch(*, judge: Judge) -> Judge:
    """Queue the judge's job (after commit): on the gpu queue for a local model, on the default
    queue for an endpoint (HTTP only). A finished or failed job may be launched again: it judges
    only what is missing (new comparisons, answers of a crashed job). An imported judge has no
    job (JudgeError)."""
    _refuse_imported(judge)
    with transaction.atomic():
        claimed = Judge.objects.filter(
            pk=judge.pk,
            status__in=[Judge.Status.DRAFT, SUCCEEDED, FAILED, CANCELLED],
        ).update(status=Judge.Status.QUEUED, error="", finished_at=None)
        if not claimed:
            raise JudgeError(f"judge {judge} is already {judge.status}")
        queue = (
            settings.CELERY_TASK_DEFAULT_QUEUE
            if judge.kind == Judge.Kind.OPENAI
            else settings.CONCORD_GPU_QUEUE
        )
        task_send("monitoring.tasks.judge_run", args=[judge.pk], queue=queue)
    judge.refresh_from_db()
    return judge


def _refuse_imported(judge: Judge) -> None:
    if judge.kind == Judge.Kind.IMPORTED:
        raise JudgeError(
            f"judge {judge} is imported: it has no job, its verdicts come from a file "
            "(import_judge_verdicts makes its next version)"
        )


def judge_run_here(*, judge: Judge) -> Judge:
    """Run a new (draft) judge's job in this process instead of on a worker (the ``judge_run``
    command: scripts and measurements)."""
    _refuse_imported(judge)
    if not Judge.objects.filter(pk=judge.pk, status=Judge.Status.DRAFT).update(
        status=Judge.Status.QUEUED
    ):
        raise JudgeError(f"judge {judge} is {judge.status}; only a new judge runs here")
    return judge_run(judge_id=judge.pk)


@dataclass(frozen=True)
class _Task:
    """One (comparison, order) to answer: the texts as the judge sees them."""

    comparison_id: int
    shown_first: str
    prompt: list[dict[str, str]]
    first: str
    second: str


# An answerer turns tasks into (raw, verdict in stored terms or None, parse error, usefulness,
# score difference) tuples, one per task, in order.
Answer = tuple[str, str | None, str, float | None, float | None]
Answerer = Callable[[Sequence[_Task]], list[Answer]]


def judge_run(*, judge_id: int) -> Judge:
    """Worker side (gpu or default queue): answer every missing (comparison, order) of the
    project, then store the combined verdicts as judgements of the machine annotator. A judge that
    is not queued (a redelivered message: running elsewhere, or finished) is left alone; a failure
    marks it failed with the error, keeping every answer already saved."""
    if not job_claim(model=Judge, pk=judge_id):
        return Judge.objects.get(pk=judge_id)
    judge = Judge.objects.select_related("project", "reward_run").get(pk=judge_id)
    try:
        with JobHeartbeat(model=Judge, pk=judge.pk):
            tasks = _missing_tasks(judge)
            answer = _answerer(judge)
            size = BATCH[judge.kind]
            for start in range(0, len(tasks), size):
                chunk = tasks[start : start + size]
                began = time.perf_counter()
                answers = answer(chunk)
                seconds = (time.perf_counter() - began) / len(chunk)
                _save_answers(judge, chunk, answers, seconds)
            judge_verdicts_store(judge=judge)
        job_finish(model=Judge, pk=judge.pk, state=SUCCEEDED)
    except Exception as exc:
        log.exception("judge %s failed", judge_id)
        job_finish(
            model=Judge, pk=judge.pk, state=FAILED, error=f"{type(exc).__name__}: {exc}"[:5000]
        )
    judge.refresh_from_db()
    return judge


def _conversation(prompt) -> list[dict[str, str]]:
    if prompt.messages:
        return [{"role": m["role"], "content": m["content"]} for m in prompt.messages]
    return [{"role": "user", "content": prompt.text}]


def _missing_tasks(judge: Judge) -> list[_Task]:
    """The (comparison, order) pairs without an answer yet, by comparison id then order; sets the
    job's total and done counters."""
    comparisons = list(
        Comparison.objects.filter(project=judge.project)
        .select_related("prompt", "response_a", "response_b")
        .order_by("pk")
    )
    answered = set(
        JudgeOutput.objects.filter(judge=judge).values_list("comparison_id", "shown_first")
    )
    Judge.objects.filter(pk=judge.pk).update(total=2 * len(comparisons), done=len(answered))
    tasks = []
    for comparison in comparisons:
        texts = {"a": comparison.response_a.text, "b": comparison.response_b.text}
        for first in ORDERS:
            if (comparison.pk, first) in answered:
                continue
            second = "b" if first == "a" else "a"
            tasks.append(
                _Task(
                    comparison.pk,
                    first,
                    _conversation(comparison.prompt),
                    texts[first],
                    texts[second],
                )
            )
    return tasks


def _save_answers(
    judge: Judge, tasks: Sequence[_Task], answers: Sequence[Answer], seconds: float
) -> None:
    rows = [
        JudgeOutput(
            judge=judge,
            comparison_id=task.comparison_id,
            shown_first=task.shown_first,
            raw=storable_text(raw),  # a NUL the model wrote becomes U+FFFD
            verdict=verdict or "",
            parse_error="" if verdict else storable_text(error or "no verdict"),
            usefulness=usefulness,
            score_diff=diff,
            seconds=seconds,
        )
        for task, (raw, verdict, error, usefulness, diff) in zip(tasks, answers, strict=True)
    ]
    with transaction.atomic():
        JudgeOutput.objects.bulk_create(rows, ignore_conflicts=True)
        done = JudgeOutput.objects.filter(judge=judge).count()
        Judge.objects.filter(pk=judge.pk).update(done=done)


# The public names of the backend for callers outside this module (eval rounds' judges).
JudgeTask = _Task


def judge_answerer(judge: Judge) -> Answerer:
    """The backend of the judge's kind, loaded once: a function from tasks (prompt, the answer
    shown first, the answer shown second; ``shown_first`` "a" or "b" names which of a pair "a", "b"
    was first) to one ``Answer`` per task, in order, with the verdict in those "a"/"b" terms.
    Every judge kind plugs in here (``_answerer``), so projects and eval rounds share it."""
    return _answerer(judge)


def _answerer(judge: Judge) -> Answerer:
    if judge.kind == Judge.Kind.REWARD_MODEL:
        return _reward_model_answerer(judge)
    if judge.kind == Judge.Kind.OPENAI:
        return _endpoint_answerer(judge)
    return _llm_answerer(judge)


def _prompt_text(conversation: list[dict[str, str]]) -> str:
    """A conversation as the judge reads it: the last user turn alone, or every turn labelled."""
    if len(conversation) == 1:
        return conversation[0]["content"]
    return "\n\n".join(f"{m['role'].title()}: {m['content']}" for m in conversation)


def _judging_messages(
    template: JudgingTemplate, tasks: Sequence[_Task], guidelines: str
) -> list[list[dict[str, str]]]:
    """One single-turn conversation per task: the judging prompt filled with its texts."""
    return [
        [
            {
                "role": "user",
                "content": template.render(
                    prompt=_prompt_text(t.prompt),
                    response_a=t.first,
                    response_b=t.second,
                    guidelines=guidelines,
                ),
            }
        ]
        for t in tasks
    ]


def _parsed_answers(
    template: JudgingTemplate, tasks: Sequence[_Task], texts: Sequence[str]
) -> list[Answer]:
    """Each generated text with its verdict in stored terms, or its parse error."""
    out: list[Answer] = []
    for task, text in zip(tasks, texts, strict=True):
        parsed = template.parse(text)
        if isinstance(parsed, Unparsed):
            out.append((text, None, parsed.reason[:300], None, None))
        else:
            verdict = parsed.stored_choice(shown_first=task.shown_first)
            out.append((text, verdict, "", parsed.usefulness, None))
    return out


def _llm_answerer(judge: Judge) -> Answerer:
    """Greedy generation with the registry model; each answer parsed by the judge's template."""
    from training.inference.generation import ChatGenerator, SamplingConfig

    template = JudgingTemplate(judge.template, asks_usefulness=asks_for_usefulness(judge.template))
    generator = ChatGenerator(
        model_get(judge.model_name).path, engine=settings.CONCORD_GENERATION_ENGINE
    )
    config = SamplingConfig(
        max_new_tokens=judge.max_new_tokens, temperature=0.0, repetition_penalty=1.0
    )
    guidelines = judge.project.guidelines

    def answer(tasks: Sequence[_Task]) -> list[Answer]:
        messages = _judging_messages(template, tasks, guidelines)
        texts = [g.text for g in generator.generate(messages, config)]
        return _parsed_answers(template, tasks, texts)

    return answer


def _endpoint_answerer(judge: Judge) -> Answerer:
    """Greedy answers (temperature 0, seed 0) of the served model through the chat client, at
    most ``max_concurrency`` requests in flight; each answer parsed by the judge's template. A
    request that fails for good (after the client's retries) fails the job; the answers of the
    batches before it are kept, so launching it again resumes."""
    from training.inference.chat_client import ChatClient

    template = JudgingTemplate(judge.template)
    client = ChatClient(
        _endpoint_config(
            judge.endpoint_url,
            judge.model_name,
            judge.api_key_env,
            judge.max_concurrency,
            judge.timeout_s,
        )
    )
    guidelines = judge.project.guidelines

    def answer(tasks: Sequence[_Task]) -> list[Answer]:
        messages = _judging_messages(template, tasks, guidelines)
        texts = client.generate(messages, max_tokens=judge.max_new_tokens, temperature=0.0, seed=0)
        return _parsed_answers(template, tasks, texts)

    return answer


def _reward_model_answerer(judge: Judge) -> Answerer:
    """The reward model's scores of both responses; the verdict by the (calibrated) tie band.
    The scores do not depend on the order, so both orders get the same verdict."""
    from training.recipes import reward_scores

    folder = Path(judge.reward_run.output_dir) / "final"
    if judge.tie_band is None:
        band = _calibrated_band(judge, folder)
        Judge.objects.filter(pk=judge.pk).update(tie_band=band.width, tie_band_kappa=band.kappa)
        judge.tie_band = band.width

    def answer(tasks: Sequence[_Task]) -> list[Answer]:
        conversations = [t.prompt for t in tasks]
        first = reward_scores(folder, conversations, [t.first for t in tasks])
        second = reward_scores(folder, conversations, [t.second for t in tasks])
        out = []
        for task, r_first, r_second in zip(tasks, first, second, strict=True):
            score_a, score_b = (
                (r_first, r_second) if task.shown_first == "a" else (r_second, r_first)
            )
            diff = score_a - score_b
            code = int(reward_verdicts(np.array([diff]), tie_band=judge.tie_band)[0])
            raw = json.dumps({"score_a": score_a, "score_b": score_b})
            out.append((raw, CHOICES[code], "", None, diff))
        return out

    return answer


def _calibrated_band(judge: Judge, folder: Path):
    """The tie band that agrees best with the humans' majority labels of the project (their
    machine-free judgements), on the comparisons that have one; 0 with fewer than 2."""
    from annotation.agreement.judges import TieBand
    from monitoring.selectors.judges import human_majority_labels
    from training.recipes import reward_scores

    labels = human_majority_labels(project=judge.project)
    labelled = {pk: code for pk, code in labels.items() if code != MISSING}
    if len(labelled) < 2:
        return TieBand(0.0, float("nan"), len(labelled))
    comparisons = list(
        Comparison.objects.filter(pk__in=labelled)
        .select_related("prompt", "response_a", "response_b")
        .order_by("pk")
    )
    conversations = [_conversation(c.prompt) for c in comparisons]
    score_a = reward_scores(folder, conversations, [c.response_a.text for c in comparisons])
    score_b = reward_scores(folder, conversations, [c.response_b.text for c in comparisons])
    diff = np.asarray(score_a) - np.asarray(score_b)
    return calibrate_tie_band(diff, np.array([labelled[c.pk] for c in comparisons]))


def _origin(judge: Judge) -> str:
    return "imported" if judge.kind == Judge.Kind.IMPORTED else "model"


def judge_verdicts_store(*, judge: Judge) -> int:
    """Store (or refresh) one judgement of the machine annotator per comparison answered in at
    least one order: the combined verdict of ``combine_orders``. shown_left is the order when one
    order alone gave a verdict, blank when the verdict combines both. Returns the judgements."""
    rows = list(
        JudgeOutput.objects.filter(judge=judge)
        .exclude(verdict="")
        .values_list("comparison_id", "shown_first", "verdict", "seconds", "orders_disagree")
    )
    if not rows:
        return 0
    ids = np.array(sorted({r[0] for r in rows}))
    index = {int(pk): k for k, pk in enumerate(ids)}
    verdicts = verdicts_from_rows(
        item=np.array([index[r[0]] for r in rows]),
        shown_first=np.array([ORDERS.index(r[1]) if r[1] else MISSING for r in rows]),
        choice=np.array([CHOICES.index(r[2]) for r in rows]),
        orders_disagree=np.array([r[4] for r in rows], dtype=bool),
        n_items=ids.size,
    )
    combined = combine_orders(verdicts)
    orders: dict[int, list[str]] = {}
    elapsed: dict[int, float] = {}
    for pk, first, _, seconds, _ in rows:
        orders.setdefault(pk, []).append(first)
        elapsed[pk] = elapsed.get(pk, 0.0) + seconds
    existing = dict(
        Judgement.objects.filter(annotator=judge.annotator).values_list("comparison_id", "pk")
    )
    new, changed = [], []
    for pk, code in zip(ids.tolist(), combined.tolist(), strict=True):
        one = orders[pk][0] if len(orders[pk]) == 1 else ""
        row = Judgement(
            pk=existing.get(pk),
            comparison_id=pk,
            annotator=judge.annotator,
            choice=CHOICES[code],
            strength=1,
            shown_left=one,
            elapsed_ms=round(elapsed[pk] * 1000),
            rationale=f"{_origin(judge)} judge {judge.name} v{judge.version}",
        )
        (changed if row.pk else new).append(row)
    with transaction.atomic():
        Judgement.objects.bulk_create(new)
        Judgement.objects.bulk_update(changed, ["choice", "shown_left", "elapsed_ms"])
    return len(new) + len(changed)

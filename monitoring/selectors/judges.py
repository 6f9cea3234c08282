"""Reads of model judges: which accounts are machines, a judge's verdicts as arrays, and its report
(the judge measured like an annotator against the humans of its project).

A judge's account is told from a person by the MACHINE_JUDGE group (``common.roles``:
``human_judgements``, ``machine_account_ids``): every read shown to people (progress, agreement,
exports, the item browser, the adjudication queue) leaves those accounts out, so the report reads
the judge from its own outputs (``judge_verdicts``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.urls import reverse

from annotation.agreement import CHOICES, MISSING, JudgementTable, item_counts, majority_vote
from annotation.agreement.judges import (
    JudgeReport,
    JudgeVerdicts,
    judge_report,
    verdicts_from_rows,
)
from annotation.models import Project
from annotation.selectors.agreement import project_judgements
from common.roles import machine_account_ids
from monitoring.models import Judge, JudgeOutput

ORDERS = ("a", "b")
UNPARSED_EXAMPLES = 5


def machine_annotator_ids() -> frozenset[int]:
    """The user ids of every machine account (the MACHINE_JUDGE group: every judge's machine
    annotator, all projects, all versions)."""
    return frozenset(machine_account_ids().values_list("user_id", flat=True))


def judges_of_project(*, project: Project) -> QuerySet[Judge]:
    """The project's judges, newest version of each name first, with their answer counts."""
    return (
        Judge.objects.filter(project=project)
        .select_related("reward_run")
        .annotate(unparsed=Count("outputs", filter=Q(outputs__verdict="")))
        .order_by("name", "-version")
    )


@dataclass(frozen=True)
class HumanJudgements:
    """The project's judgements by people only. table: as ``project_judgements`` gives it (machine
    accounts' rows never in it); comparison_ids [I]; annotator_names [R]."""

    table: JudgementTable
    comparison_ids: np.ndarray
    annotator_names: list[str]


def human_judgements(*, project: Project) -> HumanJudgements:
    """The humans' judgements of the project as arrays (``project_judgements`` leaves the machine
    accounts of the MACHINE_JUDGE group out)."""
    people = project_judgements(project=project)
    return HumanJudgements(people.table, people.comparison_ids, people.annotator_names)


def human_majority_labels(*, project: Project) -> dict[int, int]:
    """{comparison id: the humans' majority choice code}, agreement.MISSING where undecided or unjudged."""
    humans = human_judgements(project=project)
    table = humans.table
    label = majority_vote(item_counts(table.item, table.choice, n_items=table.n_items)).label
    return dict(zip(humans.comparison_ids.tolist(), label.tolist(), strict=True))


def judge_verdicts(*, judge: Judge, comparison_ids: np.ndarray) -> JudgeVerdicts:
    """The judge's parsed answers as ``JudgeVerdicts`` over items indexed like ``comparison_ids``
    (sorted); answers on comparisons not in it are left out. An imported judge's verdicts given
    with both orders combined (``shown_first`` blank) are its ``combined`` ones."""
    rows = np.array(
        list(
            JudgeOutput.objects.filter(judge=judge)
            .exclude(verdict="")
            .values_list("comparison_id", "shown_first", "verdict", "orders_disagree")
        ),
        dtype=object,
    ).reshape(-1, 4)
    ids = rows[:, 0].astype(np.int64)
    position = np.clip(np.searchsorted(comparison_ids, ids), 0, max(comparison_ids.size - 1, 0))
    known = comparison_ids.size > 0
    found = (comparison_ids[position] == ids) if known else np.zeros(ids.size, bool)
    return verdicts_from_rows(
        item=position[found],
        shown_first=np.array(
            [ORDERS.index(s) if s else MISSING for s in rows[found, 1]], dtype=np.int64
        ),
        choice=np.array([CHOICES.index(v) for v in rows[found, 2]], dtype=np.int64),
        orders_disagree=rows[found, 3].astype(bool),
        n_items=int(comparison_ids.size),
    )


@dataclass(frozen=True)
class JudgeReportData:
    """A judge's report with what names its rows: the humans' names [R] in the order of
    ``report.kappas.per_human``; unparsed: answers with no verdict, and a few of them."""

    judge: Judge
    report: JudgeReport
    human_names: list[str]
    n_outputs: int
    unparsed: int
    unparsed_examples: list[dict[str, str]]
    seconds_per_answer: float


def judge_report_data(*, judge: Judge, humans: HumanJudgements | None = None) -> JudgeReportData:
    """The judge measured like an annotator against the project's humans
    (``annotation.agreement.judges.judge_report``). ``humans``: the project's, if already read."""
    humans = humans or human_judgements(project=judge.project)
    verdicts = judge_verdicts(judge=judge, comparison_ids=humans.comparison_ids)
    outputs = JudgeOutput.objects.filter(judge=judge)
    failed = outputs.filter(verdict="")
    seconds = list(outputs.values_list("seconds", flat=True))
    examples = [
        {"comparison": str(o.comparison_id), "shown_first": o.shown_first, "reason": o.parse_error,
         "raw": o.raw[:600]}
        for o in failed.order_by("comparison_id", "shown_first")[:UNPARSED_EXAMPLES]
    ]  # fmt: skip
    return JudgeReportData(
        judge=judge,
        report=judge_report(verdicts, humans.table),
        human_names=humans.annotator_names,
        n_outputs=len(seconds),
        unparsed=failed.count(),
        unparsed_examples=examples,
        seconds_per_answer=(
            float(np.mean(seconds))
            if seconds and judge.kind != Judge.Kind.IMPORTED  # a file's verdicts have no timing
            else float("nan")
        ),
    )


def _number(value: float | int, digits: int = 4) -> float | int | None:
    if isinstance(value, int | np.integer):
        return int(value)
    return None if math.isnan(value) else round(float(value), digits)


def judge_report_summary(data: JudgeReportData) -> dict[str, Any]:
    """The report as plain numbers (None for an undefined figure): what the page shows and
    ``manage.py judge_report --json`` prints."""
    r, judge = data.report, data.judge
    length = r.length
    return {
        "judge": judge.name,
        "version": judge.version,
        "kind": judge.kind,
        "project": judge.project.slug,
        "status": judge.status,
        "tie_band": None if judge.tie_band is None else _number(judge.tie_band, 6),
        "description": judge.description,
        "answers": data.n_outputs,
        "verdicts": r.n_verdicts,
        "items": r.n_items,
        "tie_rate": _number(r.tie_rate),
        "seconds_per_answer": _number(data.seconds_per_answer),
        "kappa_consensus": _number(r.kappas.consensus),
        "kappa_consensus_n": r.kappas.consensus_n,
        "vote_agreement": r.votes.summary(),  # the MT-Bench paper's figures, with and without ties
        "kappa_per_human": [
            {"annotator": name, "kappa": _number(k), "n": int(n)}
            for name, k, n in zip(
                data.human_names, r.kappas.per_human, r.kappas.per_human_n, strict=True
            )
            if n
        ],
        "swap_pairs": r.swap.pairs,
        "swap_same_rate": _number(r.swap.same_rate),
        "swap_decisive_pairs": r.swap.decisive_pairs,
        "swap_flips": r.swap.flips,
        "swap_flip_rate": _number(r.swap.flip_rate),
        "swap_undetailed": r.swap.undetailed,  # orders disagreed, per-order verdicts not given
        "swap_flip_rate_high": _number(r.swap.flip_rate_high),
        "position_n": r.position.n,
        "position_first_share": _number(r.position.share),
        "position_bias": _number(r.position.bias),
        "position_low": _number(r.position.low),
        "position_high": _number(r.position.high),
        "position_p_value": _number(r.position.p_value),
        "length_n": None if length is None else length.n,
        "length_longer_share": None if length is None else _number(length.share),
        "length_human_share": None if length is None else _number(length.human_share),
        "length_bias": None if length is None else _number(length.bias),
        "length_p_value": None if length is None else _number(length.p_value),
        "gold_n": r.gold_n,
        "gold_accuracy": _number(r.gold_accuracy),
        "unparsed": data.unparsed,
        "unparsed_examples": data.unparsed_examples,
    }


def judges_beside_humans(*, project: Project) -> list[dict[str, Any]]:
    """The newest version of each of the project's judges that has answered, as
    ``judge_report_summary`` gives it, plus ``id`` and ``report_url`` (its judge report page): what
    the agreement dashboard shows beside the humans (``settings.CONCORD_JUDGES_HOOK``)."""
    newest: dict[str, Judge] = {}
    answered = Exists(JudgeOutput.objects.filter(judge=OuterRef("pk")))
    for judge in judges_of_project(project=project).filter(answered):
        newest.setdefault(judge.name, judge)  # newest version of each name first
    if not newest:
        return []
    humans = human_judgements(project=project)
    rows = []
    for judge in newest.values():
        summary = judge_report_summary(judge_report_data(judge=judge, humans=humans))
        summary.update(id=judge.pk, report_url=reverse("monitoring:judge-report", args=[judge.pk]))
        rows.append(summary)
    return rows


def judge_get(*, project: Project, name: str, version: int | None = None) -> Judge:
    """The judge ``name`` of the project, its newest version unless ``version`` is given; raises
    Judge.DoesNotExist."""
    judges = Judge.objects.select_related("project").filter(project=project, name=name)
    if version is not None:
        return judges.get(version=version)
    judge = judges.order_by("-version").first()
    if judge is None:
        raise Judge.DoesNotExist(f"project {project.slug!r} has no judge called {name!r}")
    return judge

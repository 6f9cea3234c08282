"""Reads of one item of the browser: the comparison, every judgement, its consensus under each rule
and its history. The majority rows are computed from the item's own votes; the Dawid-Skene row is
the stored consensus (``StoredConsensus``: one row by primary key, no project-wide computation)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from django.utils import timezone

from annotation.agreement import CHOICES, MISSING, N_CHOICES, majority_vote, side_margin
from annotation.models import (
    Adjudication,
    Assignment,
    Comparison,
    ConsensusFit,
    Flag,
    Judgement,
    Project,
    RepeatJudgement,
    StoredConsensus,
)
from annotation.selectors.adjudication import adjudication_history, comparison_flags
from common.roles import machine_account_ids

MODEL_JUDGE = "model judge"  # the origin of a machine account's judgement

# An edit is a save more than this long after the judgement was created (the first save's own
# auto_now stamps differ by microseconds).
EDIT_AFTER = timedelta(seconds=1)


@dataclass(frozen=True)
class JudgementRow:
    """A judgement as the item page lists it; ``origin``: "here" (made on the labelling screen: the
    annotator has a finished assignment on the pair), "imported", or "model judge" (a machine
    account's verdict: shown as the judge's, never counted in the consensus rows)."""

    judgement: Judgement
    origin: str

    @property
    def edited(self) -> bool:
        return self.judgement.updated_at - self.judgement.created_at > EDIT_AFTER


@dataclass(frozen=True)
class ConsensusRow:
    """The item's consensus under one rule: the choice (None: undecided), the probability of each
    choice (vote shares or posterior) and the margin (None: nothing judged)."""

    rule: str
    choice: str | None
    posterior: dict[str, float]
    margin: float | None
    note: str = ""  # how to read the row when it is not the rule's own estimate


@dataclass(frozen=True)
class HistoryEvent:
    """One event of the item's life, for the time-ordered history."""

    at: datetime
    what: str
    who: str


@dataclass(frozen=True)
class ItemDetail:
    comparison: Comparison
    judgements: list[JudgementRow]
    repeats: list[RepeatJudgement]
    consensus: list[ConsensusRow]
    history: list[HistoryEvent]
    verdicts: list[Adjudication]  # the adjudications, newest (the current one) first
    flags: list[Flag]


def _majority_rows(choices: list[str]) -> list[ConsensusRow]:
    counts = np.bincount([CHOICES.index(c) for c in choices], minlength=N_CHOICES)[None, :]
    rows = []
    rules = (
        ("Majority (a split is a tie)", "tie"),
        ("Majority (a split is undecided)", "undecided"),
    )
    for rule, split in rules:
        result = majority_vote(counts, split=split)
        label = int(result.label[0])
        margin = float(result.margin[0])
        rows.append(
            ConsensusRow(
                rule=rule,
                choice=CHOICES[label] if label != MISSING else None,
                posterior=dict(zip(CHOICES, map(float, result.posterior[0]), strict=True)),
                margin=None if np.isnan(margin) else margin,
            )
        )
    return rows


def _dawid_skene_row(comparison: Comparison, choices: list[str]) -> ConsensusRow:
    """The stored Dawid-Skene figures. Before the project's first fit its rows hold uniform
    posteriors (margin 0, not an estimate), so the row then shows the item's vote shares, their
    choice (a split undecided) and P(chosen) - P(rejected) of the shares, with a note saying so."""
    stored = StoredConsensus.objects.filter(comparison_id=comparison.pk).first()
    if stored is None:
        return ConsensusRow(rule="Dawid-Skene", choice=None, posterior={}, margin=None)
    if not ConsensusFit.objects.filter(project_id=comparison.project_id).exists():
        counts = np.bincount([CHOICES.index(c) for c in choices], minlength=N_CHOICES)[None, :]
        shares = majority_vote(counts)
        label = int(shares.label[0])
        return ConsensusRow(
            rule="Dawid-Skene",
            choice=CHOICES[label] if label != MISSING else None,
            posterior=dict(zip(CHOICES, map(float, shares.posterior[0]), strict=True)),
            margin=float(side_margin(shares.posterior, shares.label)[0]),
            note="not fitted yet: the vote shares until the project's first fit",
        )
    return ConsensusRow(
        rule="Dawid-Skene",
        choice=stored.ds_choice or None,
        posterior={name: getattr(stored, f"p_{name}") for name in CHOICES},
        margin=stored.ds_margin,
    )


def _history(
    comparison: Comparison,
    judgements: list[JudgementRow],
    repeats: list[RepeatJudgement],
    verdicts: list[Adjudication],
    flags: list[Flag],
) -> list[HistoryEvent]:
    now = timezone.now()
    events = []
    for a in comparison.assignments.select_related("annotator").order_by("claimed_at", "id"):
        who = a.annotator.get_username()
        kind = "" if a.kind == Assignment.Kind.NORMAL else f" ({a.get_kind_display().lower()})"
        events.append(HistoryEvent(a.claimed_at, f"claimed{kind}", who))
        if a.finished_at is not None:
            what = "judged" if a.status == Assignment.Status.DONE else "skipped"
            events.append(HistoryEvent(a.finished_at, f"assignment finished: {what}", who))
        elif a.status == Assignment.Status.ACTIVE and a.expires_at < now:
            events.append(HistoryEvent(a.expires_at, "lease expired", who))
    for row in judgements:
        j = row.judgement
        who = j.annotator.get_username()
        events.append(HistoryEvent(j.created_at, f"judgement created ({row.origin})", who))
        if row.edited:
            events.append(HistoryEvent(j.updated_at, "judgement edited", who))
    for r in repeats:
        events.append(HistoryEvent(r.created_at, "swap repeat judged", r.annotator.get_username()))
    for v in verdicts:
        events.append(
            HistoryEvent(
                v.decided_at,
                f"adjudicated: {v.get_choice_display()}",
                v.decided_by.get_username(),
            )
        )
    for f in flags:
        events.append(
            HistoryEvent(
                f.created_at,
                f"flagged: {f.get_reason_display().lower()}",
                f.annotator.get_username(),
            )
        )
    return sorted(events, key=lambda e: e.at)


def item_detail(*, project: Project, comparison_id: int) -> ItemDetail | None:
    """The item page's data for comparison ``comparison_id`` of ``project``; None if it is not one
    of the project's comparisons."""
    comparison = (
        Comparison.objects.filter(project=project, pk=comparison_id)
        .select_related("prompt", "response_a", "response_b")
        .first()
    )
    if comparison is None:
        return None
    on_screen = set(
        comparison.assignments.filter(status=Assignment.Status.DONE).values_list(
            "annotator_id", flat=True
        )
    )
    machines = set(machine_account_ids().values_list("user_id", flat=True))

    def origin(annotator_id: int) -> str:
        if annotator_id in machines:
            return MODEL_JUDGE
        return "here" if annotator_id in on_screen else "imported"

    judgements = [
        JudgementRow(j, origin(j.annotator_id))
        for j in Judgement.objects.filter(comparison=comparison)
        .select_related("annotator")
        .order_by("created_at", "id")
    ]
    repeats = list(
        RepeatJudgement.objects.filter(comparison=comparison)
        .select_related("annotator")
        .order_by("created_at", "id")
    )
    choices = [row.judgement.choice for row in judgements if row.origin != MODEL_JUDGE]
    verdicts = adjudication_history(comparison)
    flags = comparison_flags(comparison)
    return ItemDetail(
        comparison=comparison,
        judgements=judgements,
        repeats=repeats,
        consensus=[*_majority_rows(choices), _dawid_skene_row(comparison, choices)],
        history=_history(comparison, judgements, repeats, verdicts, flags),
        verdicts=verdicts,
        flags=flags,
    )

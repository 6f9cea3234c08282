"""Reads for adjudication and guidelines versions: the queue of comparisons that need a decision, the
current verdict of a comparison and its history, annotators' accuracy against verdicts, the headline
agreement per guidelines version.

The queue: a comparison needs a decision when
- "split": it has all ``overlap`` judgements and no majority (``annotation.agreement.top_choice``);
- "uncertain": it has all its judgements and its Dawid-Skene posterior for the winning verdict is
  under ``threshold`` (the queue's parameter, 0-1; default DEFAULT_THRESHOLD);
- "gold": it is a gold item and its majority verdict is not the gold answer;
- "flagged": an annotator flagged it (after its current adjudication, if any).
An adjudicated comparison leaves the queue unless flagged again afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from django.contrib.auth import get_user_model
from django.db.models import Count, Max

from annotation import agreement
from annotation.models import (
    Adjudication,
    Comparison,
    Flag,
    GuidelinesVersion,
    Judgement,
    Project,
)
from annotation.selectors.agreement import CHOICE_CODES, project_judgements
from common.roles import human_judgements, not_machine

DEFAULT_THRESHOLD = 0.8
QUEUE_REASONS = ("split", "uncertain", "gold", "flagged")


@dataclass(frozen=True)
class QueueEntry:
    """One comparison of the queue: its id, why it is there (some of QUEUE_REASONS), its votes per
    verdict ({choice: n}) and the Dawid-Skene posterior of the winner (0-1; None when unjudged)."""

    comparison_id: int
    reasons: tuple[str, ...]
    votes: dict[str, int] = field(default_factory=dict)
    posterior: float | None = None


def _flagged_since_verdict(project: Project) -> set[int]:
    """Comparisons with a flag newer than their current adjudication (or with no adjudication)."""
    last_flag = dict(
        Flag.objects.filter(comparison__project=project)
        .values("comparison_id")
        .annotate(at=Max("created_at"))
        .values_list("comparison_id", "at")
    )
    decided = dict(
        Adjudication.objects.filter(
            comparison_id__in=list(last_flag), superseded_at__isnull=True
        ).values_list("comparison_id", "decided_at")
    )
    return {cid for cid, at in last_flag.items() if cid not in decided or at > decided[cid]}


def adjudication_queue(
    *, project: Project, threshold: float = DEFAULT_THRESHOLD
) -> list[QueueEntry]:
    """The comparisons that need a decision, by id (rules in the module docstring).

    ``threshold``: the Dawid-Skene posterior (0-1) under which a complete comparison is uncertain;
    0 turns the rule off. Raises ValueError outside [0, 1].
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be between 0 and 1, got {threshold}")
    data = project_judgements(project=project)
    table = data.table
    ids = data.comparison_ids
    reasons: dict[int, list[str]] = {}
    votes: dict[int, dict[str, int]] = {}
    posteriors: dict[int, float] = {}
    if table.item.size:
        counts = agreement.item_counts(table.item, table.choice, n_items=table.n_items)
        n = counts.sum(axis=1)
        majority = agreement.top_choice(counts, split="undecided")
        # Overlap reduction gives some comparisons fewer annotators (target_overlap): complete at that.
        reduced = dict(
            Comparison.objects.filter(project=project, target_overlap__isnull=False).values_list(
                "pk", "target_overlap"
            )
        )
        needed = np.array([reduced.get(int(cid), project.overlap) for cid in ids], dtype=np.int64)
        complete = n >= needed[: n.size]
        ds = agreement.table_dawid_skene(table).consensus
        top = ds.posterior.max(axis=1)
        gold = table.gold if table.gold is not None else np.full(n.size, agreement.MISSING)
        rules = {
            "split": complete & (majority == agreement.MISSING),
            "uncertain": complete & (top < threshold),
            "gold": (gold != agreement.MISSING)
            & (majority != agreement.MISSING)
            & (majority != gold),
        }
        for name, hits in rules.items():
            for i in np.flatnonzero(hits):
                reasons.setdefault(int(ids[i]), []).append(name)
    adjudicated = set(
        Adjudication.objects.filter(
            comparison__project=project, superseded_at__isnull=True
        ).values_list("comparison_id", flat=True)
    )
    for cid in adjudicated:
        reasons.pop(cid, None)
    for cid in _flagged_since_verdict(project):
        reasons.setdefault(cid, []).append("flagged")
    if table.item.size and reasons:
        # Votes and posteriors of the queued comparisons only (what the page lists).
        for i in np.flatnonzero(np.isin(ids, list(reasons)) & (n > 0)):
            cid = int(ids[i])
            votes[cid] = {agreement.CHOICES[k]: int(c) for k, c in enumerate(counts[i]) if c > 0}
            posteriors[cid] = round(float(top[i]), 4)
    return [
        QueueEntry(
            comparison_id=cid,
            reasons=tuple(why),
            votes=votes.get(cid, {}),
            posterior=posteriors.get(cid),
        )
        for cid, why in sorted(reasons.items())
    ]


def queue_comparison(*, project: Project, comparison_id: int) -> Comparison | None:
    """The project's comparison ``comparison_id`` with its prompt and responses, or None."""
    return (
        Comparison.objects.filter(project=project, pk=comparison_id)
        .select_related("prompt", "response_a", "response_b")
        .first()
    )


def adjudication_for(comparison: Comparison) -> Adjudication | None:
    """The comparison's current verdict (who, when, why in ``note``), or None. For the item page."""
    return (
        Adjudication.objects.filter(comparison=comparison, superseded_at__isnull=True)
        .select_related("decided_by")
        .first()
    )


def adjudication_history(comparison: Comparison) -> list[Adjudication]:
    """Every verdict on the comparison, newest first (the current one, then those it superseded)."""
    return list(
        Adjudication.objects.filter(comparison=comparison)
        .select_related("decided_by")
        .order_by("-decided_at", "-pk")
    )


def comparison_flags(comparison: Comparison) -> list[Flag]:
    """The flags annotators put on the comparison, newest first."""
    return list(Flag.objects.filter(comparison=comparison).select_related("annotator"))


def adjudicated_choices(*, project: Project) -> dict[int, str]:
    """{comparison id: current adjudicated verdict (a Choice value)} for the project."""
    return dict(
        Adjudication.objects.filter(
            comparison__project=project, superseded_at__isnull=True
        ).values_list("comparison_id", "choice")
    )


def annotator_adjudicated_accuracy(*, project: Project) -> dict[str, dict[str, float | int]]:
    """Per annotator (username): ``{"n": adjudicated comparisons they judged, "accuracy": share of
    those where their verdict is the adjudicated one (0-1)}``; annotators with none are left out."""
    verdicts = adjudicated_choices(project=project)
    if not verdicts:
        return {}
    username = f"annotator__{get_user_model().USERNAME_FIELD}"
    rows = human_judgements(Judgement.objects.filter(comparison_id__in=list(verdicts))).values_list(
        username, "comparison_id", "choice"
    )
    tally: dict[str, list[int]] = {}
    for who, cid, choice in rows:
        hit_n = tally.setdefault(who, [0, 0])
        hit_n[0] += int(choice == verdicts[cid])
        hit_n[1] += 1
    return {
        who: {"n": n, "accuracy": round(hits / n, 4)} for who, (hits, n) in sorted(tally.items())
    }


def guidelines_versions(*, project: Project) -> list[GuidelinesVersion]:
    """The project's guidelines versions, oldest first, with their judgement counts (``n_judgements``)."""
    return list(
        GuidelinesVersion.objects.filter(project=project)
        .annotate(n_judgements=Count("judgements", filter=not_machine("judgements__annotator")))
        .select_related("author")
        .order_by("number")
    )


def guidelines_current(*, project: Project) -> GuidelinesVersion | None:
    """The project's newest guidelines version (None before the first edit through the app)."""
    return GuidelinesVersion.objects.filter(project=project).order_by("-number").first()


def judgements_per_version(*, project: Project) -> dict[str, int]:
    """{"v<number>" or "unversioned": judgements made under it} for the project (export metadata)."""
    rows = (
        human_judgements(Judgement.objects.filter(comparison__project=project))
        .values("guidelines_version__number")
        .annotate(n=Count("pk"))
        .values_list("guidelines_version__number", "n")
    )
    return {
        ("unversioned" if number is None else f"v{number}"): n
        for number, n in sorted(rows, key=lambda row: (row[0] is not None, row[0] or 0))
    }


def headline_by_version(*, project: Project, number: int | None) -> dict[str, float | int | None]:
    """The dashboard's headline figures over the judgements made under guidelines version ``number``
    (None: those made before versioning): judgements, comparisons, percent agreement (0-1),
    Krippendorff's alpha and Gwet's AC1 (None where undefined, e.g. no comparison with two)."""
    under = (
        {"guidelines_version__number": number}
        if number is not None
        else {"guidelines_version__isnull": True}
    )
    rows = list(
        human_judgements(
            Judgement.objects.filter(comparison__project=project, **under)
        ).values_list("comparison_id", "choice")
    )
    if not rows:
        return {
            "n_judgements": 0,
            "n_items": 0,
            "percent_agreement": None,
            "alpha": None,
            "ac1": None,
        }
    _, item = np.unique(np.array([cid for cid, _ in rows], dtype=np.int64), return_inverse=True)
    codes = np.array([CHOICE_CODES[choice] for _, choice in rows], dtype=np.int64)
    counts = agreement.item_counts(item.ravel(), codes, n_items=int(item.max()) + 1)

    def figure(value: float) -> float | None:
        return round(float(value), 4) if np.isfinite(value) else None

    return {
        "n_judgements": len(rows),
        "n_items": int(counts.shape[0]),
        "percent_agreement": figure(agreement.percent_agreement(counts)),
        "alpha": figure(agreement.alpha_from_counts(counts)),
        "ac1": figure(agreement.ac1_from_counts(counts)),
    }

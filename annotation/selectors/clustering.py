"""Reads of prompt clustering: the current and latest runs, the clusters page's table and scatter,
the cluster-balanced assignment order and the held-out prompts of human-eval rounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from annotation.agreement import CHOICES, N_CHOICES, fleiss_kappa, percent_agreement
from annotation.clustering import balanced_batches, stratified_sample
from annotation.models import ClusteringRun, Comparison, Judgement, Project, Prompt, PromptCluster
from common.roles import human_judgements


def clustering_run_current(*, project: Project) -> ClusteringRun | None:
    """The project's latest succeeded run: the clustering that Prompt.cluster holds."""
    return (
        ClusteringRun.objects.filter(project=project, status=ClusteringRun.Status.SUCCEEDED)
        .order_by("-finished_at", "-id")
        .first()
    )


def clustering_run_latest(*, project: Project) -> ClusteringRun | None:
    """The project's most recent run in any state (for progress and errors)."""
    return ClusteringRun.objects.filter(project=project).order_by("-created_at", "-id").first()


@dataclass(frozen=True)
class ClusterRow:
    """One line of the cluster table: the cluster, the texts of its most central prompts, and how
    far annotators agree on its comparisons (pooled pairwise agreement and Fleiss' kappa over the
    ``judged`` comparisons with at least two judgements; None when there are none)."""

    cluster: PromptCluster
    examples: list[str]
    judged: int = 0
    agreement: float | None = None
    kappa: float | None = None


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _agreement_by_label(run: ClusteringRun) -> dict[int, tuple[int, float | None, float | None]]:
    """{label: (comparisons with 2+ judgements, percent agreement, Fleiss' kappa)} for the run."""
    label_of = dict(
        zip(run.projection.get("prompt_ids", []), run.projection.get("labels", []), strict=True)
    )
    counts: dict[int, np.ndarray] = {}
    prompt_of: dict[int, int] = {}
    judgements = human_judgements(
        Judgement.objects.filter(comparison__project_id=run.project_id)
    ).values_list("comparison_id", "comparison__prompt_id", "choice")
    for comparison_id, prompt_id, choice in judgements:
        row = counts.setdefault(comparison_id, np.zeros(N_CHOICES))
        row[CHOICES.index(choice)] += 1
        prompt_of[comparison_id] = prompt_id
    tables: dict[int, list[np.ndarray]] = {}
    for comparison_id, row in counts.items():
        label = label_of.get(prompt_of[comparison_id])
        if label is not None and row.sum() >= 2:
            tables.setdefault(label, []).append(row)
    return {
        label: (
            len(rows),
            _finite(percent_agreement(np.stack(rows))),
            _finite(fleiss_kappa(np.stack(rows))),
        )
        for label, rows in tables.items()
    }


def cluster_rows(*, run: ClusteringRun) -> list[ClusterRow]:
    """The run's clusters in label order (largest first), each with its central prompts' texts and
    its annotators' agreement."""
    clusters = list(run.clusters.order_by("label"))
    wanted = {pid for c in clusters for pid in c.central_prompt_ids}
    texts = dict(Prompt.objects.filter(id__in=wanted).values_list("id", "text"))
    agreement = _agreement_by_label(run)
    return [
        ClusterRow(
            c,
            [texts[p] for p in c.central_prompt_ids if p in texts],
            *agreement.get(c.label, (0, None, None)),
        )
        for c in clusters
    ]


@dataclass(frozen=True)
class ScatterPoint:
    """A prompt on the 2-D projection, in SVG user units (y grows downwards)."""

    x: float
    y: float
    label: int
    text: str


def cluster_scatter(
    *,
    run: ClusteringRun,
    width: int = 640,
    height: int = 420,
    margin: int = 12,
    max_points: int = 2000,
) -> tuple[list[ScatterPoint], int]:
    """The run's PCA projection scaled into a ``width`` x ``height`` box: (points, total). At most
    ``max_points`` are returned (a fixed random sample), so the page stays light for big projects."""
    ids = np.asarray(run.projection.get("prompt_ids", []), dtype=np.int64)
    if len(ids) == 0:
        return [], 0
    x = np.asarray(run.projection["x"], dtype=np.float64)
    y = np.asarray(run.projection["y"], dtype=np.float64)
    labels = np.asarray(run.projection["labels"], dtype=np.int64)
    picked = np.arange(len(ids))
    if len(ids) > max_points:
        picked = np.sort(np.random.default_rng(0).choice(len(ids), max_points, replace=False))

    def scale(values: np.ndarray, size: int, *, flip: bool) -> np.ndarray:
        low, span = values.min(), np.ptp(values) or 1.0
        unit = (values - low) / span
        return margin + (1.0 - unit if flip else unit) * (size - 2 * margin)

    px, py = scale(x, width, flip=False), scale(y, height, flip=True)
    texts = dict(Prompt.objects.filter(id__in=ids[picked].tolist()).values_list("id", "text"))
    points = [
        ScatterPoint(
            round(float(px[i]), 1),
            round(float(py[i]), 1),
            int(labels[i]),
            texts.get(int(ids[i]), ""),
        )
        for i in picked
    ]
    return points, len(ids)


def _comparison_clusters(project: Project) -> tuple[list[int], list[int]]:
    rows = list(
        Comparison.objects.filter(project=project)
        .order_by("id")
        .values_list("id", "prompt__cluster")
    )
    # Prompts added after the last run have no cluster yet: they form a group of their own (-1).
    return [cid for cid, _ in rows], [-1 if label is None else label for _, label in rows]


def comparison_ids_balanced(
    *, project: Project, batch_size: int = 10, seed: int = 0, **options: float
) -> list[int]:
    """The project's comparison ids in cluster-balanced order, for handing work to annotators.

    ``balanced_batches`` (``options``: min_clusters, rare_fraction, rare_weight) decides the order;
    its weighted draws repeat rare clusters' items and skip some others, so here each comparison
    appears once: at its first draw, and the never-drawn ones after all the drawn ones.
    """
    ids, labels = _comparison_clusters(project)
    order: list[int] = []
    seen: set[int] = set()
    for batch in balanced_batches(labels, batch_size, seed=seed, **options):
        for index in batch:
            if index not in seen:
                seen.add(index)
                order.append(ids[index])
    order.extend(ids[i] for i in range(len(ids)) if i not in seen)
    return order


def prompt_ids_held_out(
    *, project: Project, size: int, seed: int = 0, exclude: Sequence[int] = ()
) -> list[int]:
    """``size`` prompt ids stratified by cluster (human-eval rounds): each cluster keeps its share,
    every cluster represented when size allows. Prompts in ``exclude`` are never chosen."""
    rows = list(
        Prompt.objects.filter(project=project)
        .exclude(id__in=list(exclude))
        .order_by("id")
        .values_list("id", "cluster")
    )
    labels = [-1 if label is None else label for _, label in rows]
    return [rows[i][0] for i in stratified_sample(labels, size, seed=seed)]

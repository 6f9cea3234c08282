"""Prompt clustering in the database: embed what is missing, cluster, store the run and its clusters.

Writes: ``clustering_run_request`` (queue a run; one active run per project), ``clustering_run_start``
(queue it and send the Celery task), ``clustering_run_execute`` (what the task and the command run),
``prompt_embeddings_ensure`` (embed only prompts without an up-to-date embedding), ``cluster_rename``.
Reads for the clusters page, the assignment order and human-eval rounds live in
``annotation.selectors.clustering``.

The maths is in the pure ``annotation.clustering``; sentence-transformers (and so torch) is imported
only inside ``sentence_encoder``, on the worker's code path.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation.clustering import central_members, cluster_embeddings, cluster_top_terms, project_2d
from annotation.models import (
    ClusteringRun,
    Project,
    Prompt,
    PromptCluster,
    PromptEmbedding,
)
from annotation.services.active_queue import queue_order_apply
from common.errors import ConcordError
from common.jobs import task_send
from common.lifecycle import (
    FAILED,
    SUCCEEDED,
    JobHeartbeat,
    job_claim,
    job_finish,
    jobs_reap_stale,
)
from common.model_registry import model_path

logger = logging.getLogger(__name__)

# texts: list of n strings -> float32 [n, d]
Encoder = Callable[[list[str]], np.ndarray]
# (fraction done 0..1, what is happening)
Progress = Callable[[float, str], None]

# Prompts per encode call and per database write. Large enough that the database round trip is
# noise next to the encoding; the encoder batches inside (ENCODE_BATCH).
EMBED_CHUNK = 512
ENCODE_BATCH = 64
# Most central prompts kept per cluster (the page shows them as examples).
CENTRAL_PROMPTS = 5
TOP_TERMS = 8
# A run still queued this long after it was requested is taken as lost (its message never reached a
# worker) when the next run is requested; a running one is the reaper's (common.lifecycle).
STALE_AFTER = timedelta(minutes=30)
# A new cluster takes an old cluster's name when their members overlap by more than half (Jaccard):
# two disjoint new clusters can never both pass, so a name is carried at most once.
NAME_CARRY_JACCARD = 0.5
ACTIVE = (ClusteringRun.Status.QUEUED, ClusteringRun.Status.RUNNING)


class ClusteringError(ConcordError):
    """A clustering run cannot start or cannot finish; the message is for the user."""


# --- Embeddings -------------------------------------------------------------------------------------
def embedding_text(prompt: Prompt) -> str:
    """The text embedded for a prompt: its text, or for a conversation every user turn joined by
    newlines (a last turn such as "and in descending order?" means little on its own)."""
    if prompt.messages:
        turns = [m["content"] for m in prompt.messages if m.get("role") == "user"]
        if turns:
            return "\n".join(turns)
    return prompt.text


def text_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text: what PromptEmbedding.text_hash compares."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.cache
def sentence_transformer(model_name: str):  # -> SentenceTransformer (import deferred)
    """The registry's sentence encoder, loaded on the CPU once per process (offline)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_path(model_name)), device="cpu")


def sentence_encoder(model_name: str) -> Encoder:
    """An encoder backed by the packaged Sentence-BERT model (loaded once per process, offline).

    Returns unit-length float32 vectors [n, d]; d = 384 for all-MiniLM-L6-v2.
    """
    model = sentence_transformer(model_name)

    def encode(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts,
            batch_size=ENCODE_BATCH,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        ).astype(np.float32, copy=False)

    return encode


def prompt_embeddings_ensure(
    *,
    project: Project,
    model_name: str,
    encoder: Encoder | None = None,
    chunk_size: int = EMBED_CHUNK,
    progress: Progress | None = None,
) -> int:
    """Embed the project's prompts that have no embedding of their current text under
    ``model_name``; returns how many were embedded (0 when all are up to date, and then the model is
    not even loaded).

    Texts are sorted by length before chunking, so each encoder batch pads little.
    """
    known = dict(
        PromptEmbedding.objects.filter(prompt__project=project, model_name=model_name).values_list(
            "prompt_id", "text_hash"
        )
    )
    todo: list[tuple[int, str, str]] = []
    for prompt in Prompt.objects.filter(project=project).only("id", "text", "messages"):
        text = embedding_text(prompt)
        digest = text_hash(text)
        if known.get(prompt.id) != digest:
            todo.append((prompt.id, text, digest))
    if not todo:
        return 0
    encode = encoder or sentence_encoder(model_name)
    todo.sort(key=lambda row: len(row[1]))
    for start in range(0, len(todo), chunk_size):
        chunk = todo[start : start + chunk_size]
        vectors = np.asarray(encode([text for _, text, _ in chunk]), dtype="<f4")
        if vectors.ndim != 2 or len(vectors) != len(chunk):
            raise ClusteringError(
                f"the encoder returned shape {vectors.shape} for {len(chunk)} texts"
            )
        PromptEmbedding.objects.bulk_create(
            [
                PromptEmbedding(
                    prompt_id=prompt_id,
                    model_name=model_name,
                    text_hash=digest,
                    dim=vectors.shape[1],
                    vector=vector.tobytes(),
                )
                for (prompt_id, _, digest), vector in zip(chunk, vectors, strict=True)
            ],
            update_conflicts=True,
            unique_fields=["prompt", "model_name"],
            update_fields=["text_hash", "dim", "vector"],
        )
        if progress is not None:
            done = start + len(chunk)
            progress(done / len(todo), f"Embedded {done} of {len(todo)} prompts")
    return len(todo)


def prompt_embeddings_matrix(*, project: Project, model_name: str) -> tuple[np.ndarray, np.ndarray]:
    """The project's stored embeddings: (prompt ids int64 [n] ascending, float32 [n, d])."""
    rows = list(
        PromptEmbedding.objects.filter(prompt__project=project, model_name=model_name)
        .order_by("prompt_id")
        .values_list("prompt_id", "dim", "vector")
    )
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
    dims = {dim for _, dim, _ in rows}
    if len(dims) != 1:
        raise ClusteringError(f"embeddings of {model_name!r} have mixed dimensions {sorted(dims)}")
    ids = np.fromiter((prompt_id for prompt_id, _, _ in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(bytes(vector) for _, _, vector in rows), dtype="<f4")
    return ids, matrix.reshape(len(rows), dims.pop()).astype(np.float32)


# --- Runs -------------------------------------------------------------------------------------------
def _fail_stale_runs(project: Project) -> None:
    """Fail what blocks a new run for no reason: a running run whose heartbeat stopped (the one
    reaper, run now rather than at its next beat) and a queued one no worker took in time."""
    jobs_reap_stale(models=["annotation.ClusteringRun"])
    ClusteringRun.objects.filter(
        project=project,
        status=ClusteringRun.Status.QUEUED,
        updated_at__lt=timezone.now() - STALE_AFTER,
    ).update(
        status=ClusteringRun.Status.FAILED,
        error="No worker took the run within 30 minutes; it was abandoned.",
        finished_at=timezone.now(),
    )


def clustering_run_request(
    *,
    project: Project,
    k: int | None = None,
    requested_by: AbstractBaseUser | None = None,
    model_name: str | None = None,
) -> tuple[ClusteringRun, bool]:
    """Queue a clustering run of the project: (run, True), or (the run already queued or running,
    False). ``k`` None lets the silhouette score choose; otherwise 2 <= k <= number of prompts."""
    n_prompts = Prompt.objects.filter(project=project).count()
    if n_prompts == 0:
        raise ClusteringError(f"project {project.slug!r} has no prompts to cluster")
    if k is not None and not 2 <= k <= n_prompts:
        raise ClusteringError(
            f"k must be between 2 and the number of prompts ({n_prompts}), got {k}"
        )
    _fail_stale_runs(project)
    try:
        with transaction.atomic():
            run = ClusteringRun.objects.create(
                project=project,
                requested_by=requested_by,
                k_requested=k,
                model_name=model_name or settings.CONCORD_DEFAULT_EMBEDDING_MODEL,
                stage="Waiting for a worker",
            )
    except IntegrityError:  # clustering_one_active_run_per_project: someone was first
        return ClusteringRun.objects.get(project=project, status__in=ACTIVE), False
    return run, True


def clustering_run_start(
    *, project: Project, k: int | None = None, requested_by: AbstractBaseUser | None = None
) -> tuple[ClusteringRun, bool]:
    """Queue a run and send it to the default worker queue once the transaction commits; when a
    run is already active, return it and send nothing."""
    run, created = clustering_run_request(project=project, k=k, requested_by=requested_by)
    if created:
        task_send("annotation.tasks.cluster_prompts", args=[run.pk])
    return run, created


def _report(run: ClusteringRun, fraction: float, stage: str) -> None:
    """Progress and heartbeat, written at once (the page polls it from another process)."""
    run.progress, run.stage = min(max(fraction, 0.0), 1.0), stage
    ClusteringRun.objects.filter(pk=run.pk).update(
        progress=run.progress, stage=stage, updated_at=timezone.now()
    )


def _claim(run_id: int) -> ClusteringRun | None:
    """Move a queued run to running (the lifecycle's conditional claim); None when it is not
    queued (a redelivered message)."""
    if not job_claim(model=ClusteringRun, pk=run_id):
        return None
    return ClusteringRun.objects.select_related("project").get(pk=run_id)


def _carried_names(
    project: Project, prompt_ids: np.ndarray, labels: np.ndarray, k: int
) -> dict[int, str]:
    """Names users gave to clusters of the previous run, for the new clusters that match them."""
    previous = (
        ClusteringRun.objects.filter(project=project, status=ClusteringRun.Status.SUCCEEDED)
        .order_by("-finished_at", "-id")
        .first()
    )
    if previous is None:
        return {}
    named = {c.label: c.name for c in previous.clusters.exclude(name="")}
    if not named:
        return {}
    old_ids = previous.projection.get("prompt_ids", [])
    old_labels = previous.projection.get("labels", [])
    old_members = {
        label: {pid for pid, lab in zip(old_ids, old_labels, strict=True) if lab == label}
        for label in named
    }
    names: dict[int, str] = {}
    for label in range(k):
        members = set(prompt_ids[labels == label].tolist())
        for old_label, old in old_members.items():
            if len(members & old) > NAME_CARRY_JACCARD * len(members | old):
                names[label] = named[old_label]
    return names


def clustering_run_execute(*, run_id: int, encoder: Encoder | None = None) -> ClusteringRun:
    """Run a queued clustering: embed missing prompts, cluster, store clusters, set Prompt.cluster.

    A run that is not queued is returned untouched (the task was delivered twice). On any error the
    run is marked failed with the message, and the error is raised again.
    """
    run = _claim(run_id)
    if run is None:
        return ClusteringRun.objects.get(pk=run_id)
    try:
        with JobHeartbeat(model=ClusteringRun, pk=run.pk):
            _cluster(run, encoder)
    except Exception as exc:
        logger.exception("clustering run %s failed", run.pk)
        job_finish(
            model=ClusteringRun,
            pk=run.pk,
            state=FAILED,
            error=str(exc) or exc.__class__.__name__,
            updates={"n_embedded": run.n_embedded},
        )
        raise
    run.refresh_from_db()
    return run


def _cluster(run: ClusteringRun, encoder: Encoder | None) -> None:
    """The work of a claimed run: embed, cluster, describe, then store the clusters, the prompts'
    labels and the run's end in one transaction (rolled back when the run is no longer running)."""
    project = run.project
    _report(run, 0.02, "Embedding new prompts")
    run.n_embedded = prompt_embeddings_ensure(
        project=project,
        model_name=run.model_name,
        encoder=encoder,
        progress=lambda fraction, stage: _report(run, 0.02 + 0.78 * fraction, stage),
    )
    ids, matrix = prompt_embeddings_matrix(project=project, model_name=run.model_name)
    if len(ids) == 0:
        raise ClusteringError(f"project {project.slug!r} has no prompts to cluster")
    if run.k_requested is not None and run.k_requested > len(ids):
        raise ClusteringError(
            f"k = {run.k_requested} is more than the {len(ids)} prompts of the project"
        )
    _report(run, 0.8, f"Clustering {len(ids)} prompts")
    result = cluster_embeddings(matrix, k=run.k_requested)
    _report(run, 0.9, "Describing the clusters")
    prompts = Prompt.objects.in_bulk(ids.tolist())
    texts = [embedding_text(prompts[int(pid)]) for pid in ids]
    terms = cluster_top_terms(texts, result.labels, n_terms=TOP_TERMS)
    central = central_members(matrix, result.labels, result.centroids, n=CENTRAL_PROMPTS)
    xy = project_2d(matrix)
    names = _carried_names(project, ids, result.labels, result.k)
    sizes = result.sizes
    with transaction.atomic():
        PromptCluster.objects.bulk_create(
            PromptCluster(
                run=run,
                label=label,
                name=names.get(label, ""),
                size=int(sizes[label]),
                share=float(sizes[label] / len(ids)),
                top_terms=terms.get(label, []),
                central_prompt_ids=[int(ids[i]) for i in central[label]],
            )
            for label in range(result.k)
        )
        Prompt.objects.filter(project=project).update(cluster=None)
        for label in range(result.k):
            members = ids[result.labels == label].tolist()
            Prompt.objects.filter(project=project, id__in=members).update(cluster=label)
        finished = job_finish(
            model=ClusteringRun,
            pk=run.pk,
            state=SUCCEEDED,
            updates={
                "k": result.k,
                "silhouette": result.silhouette,
                "silhouette_by_k": {str(k): v for k, v in result.silhouette_by_k.items()},
                "n_prompts": len(ids),
                "n_embedded": run.n_embedded,
                "progress": 1.0,
                "stage": "Done",
                "projection": {
                    "prompt_ids": ids.tolist(),
                    "labels": result.labels.tolist(),
                    "x": np.round(xy[:, 0], 4).tolist(),
                    "y": np.round(xy[:, 1], 4).tolist(),
                },
                "updated_at": timezone.now(),
            },
        )
        if not finished:  # the reaper failed it meanwhile: keep the previous clusters
            raise ClusteringError(f"clustering run {run.pk} was stopped before it finished")
        # The queue by the project's own order: cluster-balanced, or its acquisition strategy
        # (whose batches mix the new clusters); rebalancing alone would drop the strategy.
        queue_order_apply(project=project)


def cluster_rename(*, cluster: PromptCluster, name: str) -> PromptCluster:
    """Give a cluster a name (blank to clear it); later runs carry it to the matching cluster."""
    name = name.strip()
    max_length = PromptCluster._meta.get_field("name").max_length
    if len(name) > max_length:
        raise ClusteringError(f"a cluster name has at most {max_length} characters")
    cluster.name = name
    cluster.save(update_fields=["name"])
    return cluster

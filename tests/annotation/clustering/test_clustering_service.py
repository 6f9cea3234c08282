"""Clustering in the database: only missing embeddings are computed, runs store their clusters and
keep Prompt.cluster in sync, one run at a time, failures recorded; the command and the task."""

from datetime import timedelta

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from annotation.models import (
    ClusteringRun,
    Comparison,
    Prompt,
    PromptCluster,
    PromptEmbedding,
    QueueOrder,
)
from annotation.selectors import clustering as selectors
from annotation.services import clustering as service
from annotation.services.active_queue import acquisition_order, ensemble_scores_store
from annotation.tasks import cluster_prompts
from tests.factories import ComparisonFactory, PromptFactory

MODEL = "all-minilm-l6-v2"


def _run(project, *, k=None, encoder=None) -> ClusteringRun:
    run, created = service.clustering_run_request(project=project, k=k)
    assert created
    return service.clustering_run_execute(run_id=run.pk, encoder=encoder)


def test_embeddings_are_float32_bytes_with_model_name(topic_project, encoder):
    """Each prompt gets one row: 8 float32 values = 32 bytes, the model's name, the text's hash."""
    project, topic_of = topic_project
    assert service.prompt_embeddings_ensure(project=project, model_name=MODEL) == 12
    row = PromptEmbedding.objects.get(prompt__text="Capital city of Canada")
    assert (row.model_name, row.dim, len(bytes(row.vector))) == (MODEL, 8, 32)
    expected = encoder(["Capital city of Canada"])[0]
    assert np.array_equal(np.frombuffer(bytes(row.vector), dtype="<f4"), expected)
    ids, matrix = service.prompt_embeddings_matrix(project=project, model_name=MODEL)
    assert ids.tolist() == sorted(topic_of) and matrix.shape == (12, 8)


def test_texts_are_embedded_shortest_first_in_chunks(topic_project, encoder):
    project, _ = topic_project
    service.prompt_embeddings_ensure(project=project, model_name=MODEL, chunk_size=5)
    assert [len(call) for call in encoder.calls] == [5, 5, 2]
    lengths = [len(text) for text in encoder.embedded]
    assert lengths == sorted(lengths)


def test_a_run_recovers_the_topics_and_syncs_prompt_cluster(topic_project, encoder):
    """k = 3 on three keyword topics: each topic is exactly one cluster, Prompt.cluster matches the
    stored projection, sizes 4/4/4 with shares 1/3, and the top terms name the topic."""
    project, topic_of = topic_project
    run = _run(project, k=3)
    assert (run.status, run.k, run.n_prompts, run.n_embedded) == ("succeeded", 3, 12, 12)
    cluster_of = dict(Prompt.objects.filter(project=project).values_list("id", "cluster"))
    assert {(topic_of[p], c) for p, c in cluster_of.items()} == {
        (topic, cluster_of[p]) for p, topic in topic_of.items()
    }
    assert len(set(cluster_of.values())) == 3
    assert dict(zip(run.projection["prompt_ids"], run.projection["labels"], strict=True)) == (
        cluster_of
    )
    clusters = list(run.clusters.all())
    assert [(c.size, round(c.share, 4)) for c in clusters] == [(4, 0.3333)] * 3
    for cluster in clusters:
        topic = {topic_of[p] for p in cluster.central_prompt_ids}
        assert len(cluster.central_prompt_ids) == 4 and len(topic) == 1
        assert topic.pop() in cluster.top_terms


def test_reclustering_embeds_nothing_already_embedded(topic_project, encoder):
    """The second run encodes no text; a new prompt is the only text of the third."""
    project, _ = topic_project
    _run(project, k=3)
    encoder.calls.clear()
    second = _run(project, k=3)
    assert encoder.calls == [] and second.n_embedded == 0
    PromptFactory(project=project, text="Best python debugger?")
    third = _run(project, k=3)
    assert encoder.embedded == ["Best python debugger?"] and third.n_embedded == 1
    assert PromptEmbedding.objects.filter(prompt__project=project).count() == 13


def test_a_changed_text_is_embedded_again(topic_project, encoder):
    project, _ = topic_project
    service.prompt_embeddings_ensure(project=project, model_name=MODEL)
    prompt = Prompt.objects.get(text="Name the capital of Peru")
    prompt.text = "Name the capital of Chile"
    prompt.save()
    encoder.calls.clear()
    assert service.prompt_embeddings_ensure(project=project, model_name=MODEL) == 1
    assert encoder.embedded == ["Name the capital of Chile"]


def test_a_conversation_is_embedded_by_its_user_turns(db):
    messages = [
        {"role": "user", "content": "I have a dict in Python."},
        {"role": "assistant", "content": "Use sorted()."},
        {"role": "user", "content": "Descending?"},
    ]
    prompt = PromptFactory(text="Descending?", messages=messages)
    assert service.embedding_text(prompt) == "I have a dict in Python.\nDescending?"


def test_silhouette_chooses_k_when_none_is_given(topic_project, encoder):
    project, _ = topic_project
    run = _run(project)
    assert run.k == 3 and set(run.silhouette_by_k) == {"2", "3"}  # floor(sqrt(12)) = 3


def test_one_active_run_per_project(topic_project):
    project, _ = topic_project
    first, created = service.clustering_run_request(project=project)
    again, created_again = service.clustering_run_request(project=project, k=2)
    assert created and not created_again and again.pk == first.pk


def test_a_run_no_worker_took_no_longer_blocks(topic_project):
    """A run queued half an hour ago that no worker took (its message was lost) is failed; a new
    one may start."""
    project, _ = topic_project
    stale, _ = service.clustering_run_request(project=project)
    ClusteringRun.objects.filter(pk=stale.pk).update(
        updated_at=timezone.now() - timedelta(minutes=31)
    )
    _, created = service.clustering_run_request(project=project)
    stale.refresh_from_db()
    assert created and stale.status == "failed" and "No worker took the run" in stale.error


def test_a_running_run_whose_heartbeat_stopped_no_longer_blocks(topic_project, settings):
    """A running run silent for longer than CONCORD_HEARTBEAT_STALE_S is failed by the reaper when
    the next run is asked for, not a beat later; a new one may start."""
    settings.CONCORD_HEARTBEAT_STALE_S = 60
    project, _ = topic_project
    stale, _ = service.clustering_run_request(project=project)
    ClusteringRun.objects.filter(pk=stale.pk).update(
        status="running", heartbeat_at=timezone.now() - timedelta(seconds=61)
    )
    _, created = service.clustering_run_request(project=project)
    stale.refresh_from_db()
    assert created and stale.status == "failed" and "stopped answering" in stale.error


@pytest.mark.parametrize(("k", "message"), [(1, "between 2 and"), (13, r"prompts \(12\), got 13")])
def test_bad_k_is_refused_before_queueing(topic_project, k, message):
    project, _ = topic_project
    with pytest.raises(service.ClusteringError, match=message):
        service.clustering_run_request(project=project, k=k)
    assert not ClusteringRun.objects.exists()


def test_a_redelivered_task_does_nothing(topic_project, encoder):
    project, _ = topic_project
    run = _run(project, k=3)
    encoder.calls.clear()
    again = service.clustering_run_execute(run_id=run.pk)
    assert again.status == "succeeded" and encoder.calls == []
    assert PromptCluster.objects.filter(run=run).count() == 3


def test_a_failure_is_recorded_on_the_run(topic_project):
    def broken(texts):
        raise RuntimeError("out of memory")

    project, _ = topic_project
    run, _ = service.clustering_run_request(project=project)
    with pytest.raises(RuntimeError):
        service.clustering_run_execute(run_id=run.pk, encoder=broken)
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", "out of memory")
    assert not Prompt.objects.filter(cluster__isnull=False).exists()


def test_names_carry_over_to_the_matching_cluster(topic_project, encoder):
    """A user names the 'sleep' cluster; after re-clustering the same members carry the name."""
    project, _ = topic_project
    first = _run(project, k=3)
    sleep = next(c for c in first.clusters.all() if "sleep" in c.top_terms)
    service.cluster_rename(cluster=sleep, name="  Sleep advice ")
    second = _run(project, k=3)
    names = {c.name for c in second.clusters.all()}
    assert names == {"Sleep advice", ""}
    assert selectors.clustering_run_current(project=project).pk == second.pk


def test_command_clusters_and_prints_the_table(topic_project, encoder, capsys):
    call_command("cluster_prompts", "--project", "topics", "--k", "3")
    out = capsys.readouterr().out
    assert out.startswith("12 prompts (12 newly embedded) in 3 clusters")
    assert out.count("33.3%") == 3
    call_command("cluster_prompts", "--project", "topics", "--json")
    assert '"n_embedded": 0' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--project", "nope"], "no project with slug 'nope'"), (["--k", "40"], "between 2 and")],
)
def test_command_errors_are_clear(topic_project, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("cluster_prompts", *(["--project", "topics", *args]))


def test_task_runs_on_the_default_queue(topic_project, encoder):
    project, _ = topic_project
    run, _ = service.clustering_run_request(project=project, k=3)
    route = cluster_prompts.app.amqp.router.route({}, cluster_prompts.name)
    assert route["queue"].name == "default"
    assert cluster_prompts.apply(args=[run.pk]).get() == {"run": run.pk, "status": "succeeded"}


def test_start_sends_the_task_after_commit(
    topic_project, monkeypatch, django_capture_on_commit_callbacks
):
    project, _ = topic_project
    sent = []
    monkeypatch.setattr(cluster_prompts, "apply_async", lambda args: sent.append(*args))
    with django_capture_on_commit_callbacks(execute=True):
        run, created = service.clustering_run_start(project=project)
    _, created_again = service.clustering_run_start(project=project)
    assert created and not created_again and sent == [run.pk]


def test_comparisons_come_in_balanced_order_each_once(topic_project, encoder):
    """Every comparison exactly once; each consecutive batch of 3 mixes topics."""
    project, topic_of = topic_project
    for prompt_id in topic_of:
        ComparisonFactory(project=project, prompt_id=prompt_id)
    _run(project, k=3)
    order = selectors.comparison_ids_balanced(project=project, batch_size=3)
    comparisons = {c.pk: c.prompt_id for c in project.comparisons.all()}
    assert sorted(order) == sorted(comparisons)
    first_batch = {topic_of[comparisons[c]] for c in order[:3]}
    assert len(first_batch) >= 2


def test_held_out_prompts_are_stratified(topic_project, encoder):
    project, topic_of = topic_project
    _run(project, k=3)
    chosen = selectors.prompt_ids_held_out(project=project, size=6)
    assert sorted(topic_of[p] for p in chosen) == ["capital"] * 2 + ["python"] * 2 + ["sleep"] * 2


def test_a_run_keeps_the_projects_acquisition_order(topic_project, encoder):
    """A project ordered by ensemble disagreement, scored already (comparison i disagreement
    0.1 * (i + 1)): after clustering, the queue is the acquisition order over the new clusters
    (each batch mixing them), not the plain cluster-balanced one."""
    project, topic_of = topic_project
    project.queue_order, project.exploration_share = QueueOrder.DISAGREEMENT, 0.0
    project.save(update_fields=["queue_order", "exploration_share"])
    ids = [ComparisonFactory(project=project, prompt_id=p).pk for p in topic_of]
    spread = 0.1 * np.arange(1, len(ids) + 1)
    members = np.array([-1.0, 1.0, 0.0])[:, None] * spread * np.sqrt(1.5)
    ensemble_scores_store(
        project=project, comparison_ids=ids, rewards_a=members, rewards_b=np.zeros_like(members)
    )
    _run(project, k=3)
    queue = list(
        Comparison.objects.filter(project=project)
        .order_by("queue_position")
        .values_list("pk", flat=True)
    )
    assert queue == acquisition_order(project=project)
    assert queue != selectors.comparison_ids_balanced(project=project, batch_size=3)

"""The clusters page: ML engineers only; scatter, table, agreement per cluster, rename, re-cluster
with a run queued once and its progress served as JSON."""

import pytest
from django.urls import reverse

from annotation.models import ClusteringRun, Prompt, PromptCluster
from annotation.selectors import clustering as selectors
from annotation.services import clustering as service
from annotation.tasks import cluster_prompts
from tests.factories import ComparisonFactory, JudgementFactory, UserFactory
from tests.helpers.clients import logged_in


def _url(name: str, *args) -> str:
    return reverse(f"annotation:{name}", args=["topics", *args])


def _clustered(project) -> ClusteringRun:
    run, _ = service.clustering_run_request(project=project, k=3)
    return service.clustering_run_execute(run_id=run.pk)


@pytest.fixture
def sent(monkeypatch):
    """Task messages that would go to the broker: the run ids."""
    ids = []
    monkeypatch.setattr(cluster_prompts, "apply_async", lambda args: ids.append(*args))
    return ids


@pytest.mark.parametrize("role", ["annotator", "reviewer"])
def test_only_ml_engineers_see_the_page(topic_project, role, request):
    user = request.getfixturevalue(role)
    assert logged_in(user).get(_url("clusters")).status_code == 404


def test_page_without_clustering_says_how_to_start(topic_project, ml_engineer):
    response = logged_in(ml_engineer).get(_url("clusters"))
    assert response.status_code == 200
    assert b"cluster_prompts --project topics" in response.content


def test_page_shows_scatter_and_cluster_table(topic_project, encoder, ml_engineer):
    project, _ = topic_project
    _clustered(project)
    response = logged_in(ml_engineer).get(_url("clusters"))
    html = response.content.decode()
    assert html.count("<circle ") == 12
    assert html.count('<tr data-cluster="') == 3
    assert "12 prompts in 3 clusters" in html
    assert "capital" in html and "What is the capital of Australia?" in html
    assert "<script>" not in html and "clusters/clusters.js" in html  # no inline script


def test_recluster_queues_one_run_and_sends_the_task(
    topic_project, ml_engineer, sent, django_capture_on_commit_callbacks
):
    client = logged_in(ml_engineer)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(_url("clusters-recluster"), {"k": "3"}, follow=True)
    run = ClusteringRun.objects.get()
    assert (run.k_requested, run.status, run.requested_by) == (3, "queued", ml_engineer)
    assert sent == [run.pk] and b"Re-clustering queued." in response.content
    response = client.post(_url("clusters-recluster"), {"k": ""}, follow=True)
    assert b"already queued" in response.content and ClusteringRun.objects.count() == 1
    status = client.get(_url("clusters-status")).json()
    assert status | {"id": 0} == {
        "id": 0,
        "status": "queued",
        "status_label": "Queued",
        "progress": 0.0,
        "stage": "Waiting for a worker",
        "error": "",
        "active": True,
    }


@pytest.mark.parametrize(("k", "message"), [("x", "whole number"), ("40", "between 2 and")])
def test_bad_k_is_reported_and_nothing_queued(topic_project, ml_engineer, sent, k, message):
    response = logged_in(ml_engineer).post(_url("clusters-recluster"), {"k": k}, follow=True)
    assert message in response.content.decode() and not ClusteringRun.objects.exists()


def test_rename_a_cluster(topic_project, encoder, ml_engineer):
    project, _ = topic_project
    run = _clustered(project)
    cluster = run.clusters.get(label=0)
    logged_in(ml_engineer).post(_url("cluster-rename", cluster.pk), {"name": "Geography"})
    assert PromptCluster.objects.get(pk=cluster.pk).name == "Geography"


def test_agreement_per_cluster(topic_project, encoder):
    """Two comparisons in the 'capital' cluster, two annotators each: one pair agrees (a, a), one
    does not (a, b). Pairwise agreement 1/2; Fleiss: pa = 0.5, shares (0.75, 0.25), pe = 0.625,
    kappa = (0.5 - 0.625) / 0.375 = -1/3. Other clusters have no judgements."""
    project, _ = topic_project
    ann1, ann2 = UserFactory(username="one"), UserFactory(username="two")
    capital = Prompt.objects.filter(project=project, text__icontains="capital")[:2]
    for prompt, second in zip(capital, ("a", "b"), strict=True):
        comparison = ComparisonFactory(project=project, prompt=prompt)
        JudgementFactory(comparison=comparison, annotator=ann1, choice="a")
        JudgementFactory(comparison=comparison, annotator=ann2, choice=second)
    run = _clustered(project)
    rows = {tuple(r.cluster.top_terms[:1]): r for r in selectors.cluster_rows(run=run)}
    row = next(r for r in rows.values() if "capital" in r.cluster.top_terms)
    assert (row.judged, row.agreement) == (2, 0.5)
    assert row.kappa == pytest.approx(-1 / 3)
    assert sum(r.judged for r in rows.values()) == 2

"""The agreement dashboard, its Celery task, the cache and the debounce, and the drill-down."""

import pytest
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from annotation.models import Judgement, Project, Prompt
from annotation.selectors import agreement as agreement_selectors
from annotation.services import agreement as agreement_services
from annotation.tasks import agreement_report_refresh
from tests.factories import UserFactory
from tests.helpers.agreement_jsonl import import_file, synthetic_rows, write_jsonl
from tests.helpers.caches import private_cache

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _private_cache(settings):
    """A cache of the test's own (the suite's Redis is shared with other tests and runs)."""
    private_cache(settings, "agreement-dashboard-tests")


@pytest.fixture
def queued(monkeypatch):
    """Records the task runs the dashboard asks for instead of sending them to the broker."""
    calls = []
    monkeypatch.setattr(
        agreement_report_refresh, "apply_async", lambda **kwargs: calls.append(kwargs)
    )
    return calls


@pytest.fixture
def project(tmp_path):
    import_file(write_jsonl(tmp_path / "rows.jsonl", synthetic_rows(90)), "dash")
    return Project.objects.get(slug="dash")


@pytest.fixture
def lead(ml_engineer):
    client = Client()
    client.force_login(ml_engineer)
    return client


def test_only_project_leads_see_the_dashboard(project, annotator, reviewer, client):
    """ML engineers only: annotators and reviewers get 404, anonymous users the login page."""
    url = reverse("annotation:agreement", args=[project.slug])
    assert client.get(url).status_code == 302
    for user in (annotator, reviewer):
        other = Client()
        other.force_login(user)
        assert other.get(url).status_code == 404
        assert (
            other.get(reverse("annotation:agreement-data", args=[project.slug])).status_code == 404
        )


def test_first_visit_queues_the_report_and_says_so(project, lead, queued):
    """No report yet: the page says it is being computed and one task run is queued at once."""
    response = lead.get(reverse("annotation:agreement", args=[project.slug]))
    assert response.status_code == 200
    assert b'data-testid="no-report"' in response.content
    assert queued == [{"args": [project.pk], "countdown": 0}]
    data = lead.get(reverse("annotation:agreement-data", args=[project.slug])).json()
    assert (data["ready"], data["refreshing"]) == (False, True)


def test_the_task_computes_and_caches_the_report(project, lead, queued):
    """After the task ran, the page shows the coefficients, the annotator table with eve's flag, the
    alert, and when the report was computed; the data endpoint serves the same report (with agreement
    per batch, day and prompt cluster)."""
    for prompt in Prompt.objects.filter(project=project):
        prompt.cluster = prompt.pk % 3
        prompt.save(update_fields=["cluster"])
    result = agreement_report_refresh.apply(args=[project.pk]).get()
    assert result["status"] == "done"
    response = lead.get(reverse("annotation:agreement", args=[project.slug]))
    content = response.content.decode()
    assert 'data-testid="coefficients"' in content and 'data-testid="computed-at"' in content
    assert "eve" in content and "position bias" in content
    assert 'data-testid="alerts"' in content
    assert not response.context["state"].stale
    assert queued == []
    data = lead.get(reverse("annotation:agreement-data", args=[project.slug])).json()
    report = data["report"]
    assert data["ready"] and not data["stale"]
    assert report["summary"]["n_judgements"] == 264
    assert report["kappa_target"] == 0.7
    assert len(report["heatmap"]["annotators"]) == 5
    # Batches as on the lead's page: the 81 non-gold comparisons in blocks of 20, numbered from 1.
    assert [row["group"] for row in report["by_batch"]] == [1, 2, 3, 4, 5]
    assert [row["n_items"] for row in report["by_batch"]] == [20, 20, 20, 20, 1]
    assert [row["group"] for row in report["by_cluster"]] == [0, 1, 2]
    assert sum(row["n_items"] for row in report["by_day"]) == 90
    assert all(p["low"] <= p["high"] for p in report["pair_intervals"] if p["low"] is not None)


def test_changed_judgements_make_the_report_stale_and_requeue_it(project, lead, queued):
    """A changed judgement changes the fingerprint: the page flags the report as out of date and
    queues one (debounced) recomputation; repeated visits do not queue more."""
    agreement_report_refresh.apply(args=[project.pk])
    judgement = Judgement.objects.filter(comparison__project=project).first()
    judgement.choice = "tie" if judgement.choice != "tie" else "a"
    judgement.save()
    url = reverse("annotation:agreement", args=[project.slug])
    first = lead.get(url)
    lead.get(url)
    assert first.context["state"].stale
    assert b'data-testid="stale"' in first.content
    assert len(queued) == 1 and queued[0]["countdown"] == 5


def test_schedule_is_debounced_until_the_task_runs(project, queued):
    """Calls inside the window collapse into one run; the run clears the mark."""
    assert agreement_services.dashboard_refresh_schedule(project=project) is True
    assert agreement_services.dashboard_refresh_schedule(project=project) is False
    agreement_report_refresh.apply(args=[project.pk])
    assert agreement_services.dashboard_refresh_schedule(project=project) is True
    assert [call["countdown"] for call in queued] == [30, 30]


def test_refresh_button_queues_a_run_now(project, lead, queued):
    response = lead.post(reverse("annotation:agreement-refresh", args=[project.slug]))
    assert response.status_code == 302
    assert queued == [{"args": [project.pk], "countdown": 0}]
    assert lead.get(reverse("annotation:agreement-refresh", args=[project.slug])).status_code == 405


def test_drill_down_lists_disagreements_with_the_others(project, lead):
    """eve's page lists the comparisons where she differs from the others' majority."""
    agreement_report_refresh.apply(args=[project.pk])
    rows = agreement_selectors.annotator_disagreements(project=project, username="eve")
    assert rows and all(
        row["choice"] not in row["others"] or len(row["others"]) > 1 for row in rows
    )
    for row in rows:
        top = max(row["others"].values())
        leaders = [c for c, n in row["others"].items() if n == top]
        assert leaders != [row["choice"]]
    response = lead.get(reverse("annotation:agreement-annotator", args=[project.slug, "eve"]))
    assert response.status_code == 200
    assert b'data-testid="disagreements"' in response.content
    assert b'data-testid="annotator-stats"' in response.content
    missing = reverse("annotation:agreement-annotator", args=[project.slug, "nobody"])
    assert lead.get(missing).status_code == 404


def test_project_page_alerts_come_from_the_cached_report(project):
    """agreement_alerts() is empty before the first report and lists the flagged annotator after;
    the include template renders them with a link to the dashboard."""
    assert agreement_selectors.agreement_alerts(project=project) == []
    agreement_report_refresh.apply(args=[project.pk])
    alerts = agreement_selectors.agreement_alerts(project=project)
    assert any(alert.startswith("eve:") and "position bias" in alert for alert in alerts)
    html = render_to_string(
        "annotation/agreement_alerts.html", {"agreement_alerts": alerts, "project": project}
    )
    assert 'data-testid="agreement-alerts"' in html
    assert reverse("annotation:agreement", args=[project.slug]) in html


def test_task_for_a_deleted_project_does_nothing():
    assert agreement_report_refresh.apply(args=[987654]).get()["status"] == "gone"


def test_dashboard_static_files_are_served_from_static(project, lead, queued):
    """The page loads its script and stylesheet from static/ (no CDN, no inline script)."""
    UserFactory(username="helper")
    content = lead.get(reverse("annotation:agreement", args=[project.slug])).content.decode()
    assert "/static/annotation/agreement/agreement.js" in content
    assert "/static/annotation/agreement/agreement.css" in content
    assert "<script>" not in content and "http://" not in content.replace("http://www.w3.org", "")


def test_the_fast_rule_without_timed_judgements_names_no_empty_threshold(tmp_path, lead, queued):
    """Judgements imported without elapsed_ms: no median, so no "fast" threshold. The annotator
    table's note says so in words instead of "judgements under  ms" (a blank where the number
    was), and still states the rule (a quarter of the project's median)."""
    rows = synthetic_rows(30)
    for row in rows:
        for judgement in row["judgements"]:
            del judgement["elapsed_ms"]
    import_file(write_jsonl(tmp_path / "untimed.jsonl", rows), "untimed")
    project = Project.objects.get(slug="untimed")
    assert agreement_report_refresh.apply(args=[project.pk]).get()["status"] == "done"
    content = lead.get(reverse("annotation:agreement", args=[project.slug])).content.decode()
    assert "under  ms" not in content
    assert (
        "Fast: judgements under a quarter of the project's median time (no judgement has a"
        " recorded time yet)." in content
    )


def test_flags_are_shown_in_plain_words(project, lead):
    """The annotator table and eve's drill-down name her flag "position bias", never the stored
    value ``position_bias``: a lead reads words, not identifiers."""
    agreement_report_refresh.apply(args=[project.pk])
    dashboard = lead.get(reverse("annotation:agreement", args=[project.slug])).content.decode()
    drill_down = lead.get(
        reverse("annotation:agreement-annotator", args=[project.slug, "eve"])
    ).content.decode()
    for page in (dashboard, drill_down):
        assert '<span class="flag">position bias</span>' in page
        assert "position_bias" not in page

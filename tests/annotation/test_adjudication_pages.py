"""The adjudication queue page, the verdict form and the labelling screen's flag and notice."""

import pytest

from annotation.models import Adjudication, Assignment, Flag
from annotation.services import labelling
from annotation.services.adjudication import guidelines_update
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db
JSON = {"HTTP_ACCEPT": "application/json"}


def test_queue_page_shows_the_first_split_and_saving_moves_on(ml_engineer):
    """The page shows the split pair with its reason; saving stores the verdict (sides mapped back
    from the shown_left the form carries) and redirects past it."""
    project = ProjectFactory(slug="q", overlap=2)
    split = ComparisonFactory(project=project)
    JudgementFactory(comparison=split, choice="a")
    JudgementFactory(comparison=split, choice="b")
    client = logged_in(ml_engineer)
    page = client.get("/annotation/p/q/adjudicate/?threshold=0")
    assert page.context["comparison"] == split
    assert page.context["entry"].reasons == ("split",)
    shown_left = page.context["shown_left"]
    saved = client.post(
        f"/annotation/p/q/adjudicate/{split.pk}/",
        {"pick": "right", "shown_left": shown_left, "note": "clearer", "reason": ["split", "x"],
         "threshold": "0"},
    )  # fmt: skip
    assert saved.status_code == 302 and f"after={split.pk}" in saved["Location"]
    verdict = Adjudication.objects.get()
    assert verdict.choice == ("b" if shown_left == "a" else "a")
    assert (verdict.note, verdict.reasons, verdict.decided_by) == (
        "clearer",
        ["split"],
        ml_engineer,
    )
    assert client.get("/annotation/p/q/adjudicate/").context["comparison"] is None


def test_flag_from_the_labelling_screen_keeps_the_pair(annotator):
    """A JSON flag answers with a message; the annotator's active lease is the same pair after."""
    project = ProjectFactory(slug="f", overlap=1)
    project.members.add(annotator)
    ComparisonFactory(project=project)
    client = logged_in(annotator)
    client.get("/annotation/p/f/label/")
    assignment = Assignment.objects.get(annotator=annotator)
    answer = client.post(
        f"/annotation/p/f/label/{assignment.pk}/flag/", {"reason": "harmful", "note": "x"}, **JSON
    )
    assert answer.json() == {
        "ok": True,
        "message": "Flagged as harmful content; an adjudicator will look at it.",
    }
    bad = client.post(f"/annotation/p/f/label/{assignment.pk}/flag/", {"reason": "meh"}, **JSON)
    assert bad.status_code == 400
    assert list(Flag.objects.values_list("reason", "note")) == [("harmful", "x")]
    assert labelling.assignment_claim(annotator=annotator, project=project) == assignment


def test_labelling_screen_shows_the_guidelines_change_once(annotator):
    project = ProjectFactory(slug="g", overlap=1, guidelines="Old rule.")
    project.members.add(annotator)
    ComparisonFactory(project=project)
    JudgementFactory(comparison=ComparisonFactory(project=project), annotator=annotator)
    guidelines_update(project=project, text="New <b>rule</b>.", user=UserFactory(username="l"))
    client = logged_in(annotator)
    first = client.get("/annotation/p/g/label/").content.decode()
    assert 'data-testid="guidelines-changed"' in first
    assert "New &lt;b&gt;rule&lt;/b&gt;." in first  # the diff is text, escaped
    again = client.get("/annotation/p/g/label/").content.decode()
    assert 'data-testid="guidelines-changed"' not in again


def test_dashboard_shows_accuracy_against_verdicts_and_figures_per_version(ml_engineer, settings):
    """The annotator table gets an "Adjudicated" column; ?version=2 shows that version's headline."""
    from annotation.services.adjudication import adjudication_record
    from annotation.tasks import agreement_report_refresh

    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "adj"}
    }
    project = ProjectFactory(slug="d", overlap=2, guidelines="v1")
    people = [UserFactory(username=f"p{i}", role="Annotator") for i in range(2)]
    split = ComparisonFactory(project=project)
    for who, choice in zip(people, "ab", strict=True):
        JudgementFactory(comparison=split, annotator=who, choice=choice)
    adjudication_record(comparison=split, decided_by=ml_engineer, pick="left", shown_left="a")
    guidelines_update(project=project, text="v2", user=ml_engineer)
    agreement_report_refresh.apply(args=[project.pk]).get()
    client = logged_in(ml_engineer)
    page = client.get("/annotation/p/d/agreement/?version=none")
    rows = {row["annotator"]: row["adjudicated"] for row in page.context["annotators"]}
    assert rows == {"p0": {"n": 1, "accuracy": 1.0}, "p1": {"n": 1, "accuracy": 0.0}}
    assert page.context["version_figures"]["n_judgements"] == 2
    assert 'data-testid="version-figures"' in page.content.decode()
    assert client.get("/annotation/p/d/agreement/?version=2").context["version_figures"] == {
        "n_judgements": 0, "n_items": 0, "percent_agreement": None, "alpha": None, "ac1": None,
    }  # fmt: skip


def test_lead_page_links_the_queue_and_exports_adjudicated(ml_engineer, tmp_path, settings):
    """The lead's page links the queue; its export form's "adjudicated" consensus is what the
    export job it queues asks for."""
    settings.EXPORT_DIR = tmp_path
    project = ProjectFactory(slug="m", overlap=1)
    JudgementFactory(comparison=ComparisonFactory(project=project), choice="b")
    client = logged_in(ml_engineer)
    assert "/annotation/p/m/adjudicate/" in client.get("/annotation/p/m/manage/").content.decode()
    client.post("/annotation/p/m/exports/", {"consensus": "adjudicated"})
    assert project.export_jobs.get().options == {
        "consensus": "adjudicated", "fallback": "majority", "keep_ties": False, "min_judgements": 1,
    }  # fmt: skip

"""Suggestions: a project names a model judge's machine account; the labelling screen pre-selects its
verdict (mapped to the sides this annotator sees) and each judgement records what it was shown."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotation.forms import ProjectForm
from annotation.models import Assignment, Judgement, ProjectEvent, Side
from annotation.services import labelling
from annotation.services.labelling import Verdict
from annotation.services.projects import ProjectError, project_update
from common.roles import ANNOTATOR, ML_ENGINEER, machine_account_label, machine_account_mark
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def _machine(project, verdicts: dict[int, str], name: str = "helpful") -> object:
    """A machine account (as monitoring's judges name theirs) with one verdict per comparison id."""
    machine = UserFactory(username=f"judge:{project.slug}:{name}:v1")
    machine_account_mark(user=machine)
    for comparison_id, choice in verdicts.items():
        JudgementFactory(
            comparison_id=comparison_id, annotator=machine, choice=choice, shown_left=""
        )
    return machine


@pytest.fixture
def lead():
    return UserFactory(role=ML_ENGINEER)


@pytest.fixture
def setup(lead):
    """A project of 2 pairs (no gold, no repeats), a judge that says "a" on the first and "tie" on
    the second, named as the suggestion judge, and one annotator."""
    project = ProjectFactory(gold_every=0, repeat_every=0, overlap=1)
    first, second = ComparisonFactory(project=project), ComparisonFactory(project=project)
    machine = _machine(project, {first.pk: "a", second.pk: "tie"})
    project = project_update(project=project, actor=lead, suggestion_judge=machine)
    annotator = UserFactory(role=ANNOTATOR)
    project.members.add(annotator)
    return project, machine, annotator, (first, second)


def test_the_label_names_the_judge_and_version():
    assert machine_account_label("judge:demo:helpful-rm:v2") == "helpful-rm v2"
    assert machine_account_label("alice") == "alice"


def test_the_setting_is_saved_and_audited_by_username(setup):
    project, machine, _, _ = setup
    assert project.suggestion_judge_id == machine.pk
    event = ProjectEvent.objects.get(project=project, kind=ProjectEvent.Kind.EDITED)
    assert event.changes == {"suggestion_judge": {"before": None, "after": machine.username}}


def test_a_person_or_another_projects_judge_is_refused_and_nothing_changes(lead):
    project = ProjectFactory()
    pair = ComparisonFactory(project=project)
    person = UserFactory(role=ANNOTATOR)
    JudgementFactory(comparison=pair, annotator=person)
    other = ProjectFactory()
    elsewhere = _machine(other, {ComparisonFactory(project=other).pk: "a"})
    for account in (person, elsewhere):
        with pytest.raises(ProjectError, match="suggestion_judge"):
            project_update(project=project, actor=lead, suggestion_judge=account)
    project.refresh_from_db()
    assert project.suggestion_judge_id is None
    assert not ProjectEvent.objects.filter(project=project).exists()


def test_the_form_offers_only_this_projects_machine_accounts(setup):
    project, _, annotator, (first, _) = setup
    JudgementFactory(comparison=first, annotator=annotator)
    other = ProjectFactory()
    _machine(other, {ComparisonFactory(project=other).pk: "b"}, name="elsewhere")
    form = ProjectForm(instance=project)
    choices = [label for value, label in form.fields["suggestion_judge"].choices]
    assert choices == ["(no suggestions)", "helpful v1"]
    assert "suggestion_judge" not in ProjectForm().fields  # a new project has no judge yet


def test_the_claim_carries_the_judges_verdict_and_the_submission_records_it(setup):
    project, machine, annotator, (first, second) = setup
    seen = {}
    for _ in range(2):
        assignment = labelling.assignment_claim(annotator=annotator, project=project)
        seen[assignment.comparison_id] = assignment.suggested_choice
        assert assignment.suggested_by == machine.username
        labelling.judgement_submit(
            annotator=annotator,
            assignment_id=assignment.pk,
            verdict=Verdict("right"),
            project=project,
        )
    assert seen == {first.pk: "a", second.pk: "tie"}
    recorded = dict(
        Judgement.objects.filter(annotator=annotator).values_list(
            "comparison_id", "suggested_choice"
        )
    )
    assert recorded == {first.pk: "a", second.pk: "tie"}


def test_without_a_suggestion_judge_nothing_is_suggested_or_recorded(setup, lead):
    project, _, annotator, _ = setup
    project = project_update(project=project, actor=lead, suggestion_judge=None)
    assignment = labelling.assignment_claim(annotator=annotator, project=project)
    assert assignment.suggested_choice == ""
    labelling.judgement_submit(
        annotator=annotator, assignment_id=assignment.pk, verdict=Verdict("left"), project=project
    )
    assert Judgement.objects.get(annotator=annotator).suggested_choice == ""


def test_a_pair_the_judge_did_not_judge_records_no_suggestion(setup):
    project, _, annotator, _ = setup
    unjudged = ComparisonFactory(project=project, queue_position=-1)  # handed out first
    assignment = labelling.assignment_claim(annotator=annotator, project=project)
    assert (assignment.comparison_id, assignment.suggested_choice) == (unjudged.pk, "")
    labelling.judgement_submit(
        annotator=annotator, assignment_id=assignment.pk, verdict=Verdict("left"), project=project
    )
    assert Judgement.objects.get(annotator=annotator).suggested_choice == ""


def test_recording_the_suggestion_costs_no_extra_query(setup, lead):
    """The suggestion is read by a subquery inside the INSERT, like the guidelines version."""
    project, _, annotator, _ = setup
    counts = []
    for judge in (project.suggestion_judge, None):
        project = project_update(project=project, actor=lead, suggestion_judge=judge)
        assignment = labelling.assignment_claim(annotator=annotator, project=project)
        with CaptureQueriesContext(connection) as queries:
            labelling.judgement_submit(
                annotator=annotator, assignment_id=assignment.pk, verdict=Verdict("left"),
                project=project,
            )  # fmt: skip
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_a_swap_repeat_gets_no_suggestion(setup):
    project, _, annotator, (first, _) = setup
    JudgementFactory(comparison=first, annotator=annotator, shown_left=Side.A)
    repeat = Assignment.objects.create(
        comparison=first, annotator=annotator, kind=Assignment.Kind.REPEAT, shown_left=Side.B,
        expires_at="2999-01-01T00:00:00Z",
    )  # fmt: skip
    assignment = labelling.assignment_claim(annotator=annotator, project=project)
    assert (assignment.pk, assignment.suggested_choice) == (repeat.pk, "")


@pytest.mark.parametrize(("shown_left", "pick"), [(Side.A, "left"), (Side.B, "right")])
def test_the_screen_maps_the_suggestion_through_the_sides(setup, client, shown_left, pick):
    """The judge said A is better: shown on the left it is "left", shown on the right "right"."""
    project, _, annotator, (first, _) = setup
    Assignment.objects.create(
        comparison=first, annotator=annotator, kind=Assignment.Kind.NORMAL, shown_left=shown_left,
        expires_at="2999-01-01T00:00:00Z",
    )  # fmt: skip
    client.force_login(annotator)
    html = client.get(reverse("annotation:label", args=[project.slug])).content.decode()
    assert f'data-suggested-pick="{pick}"' in html
    assert "Suggested by helpful v1" in html
    data = client.post(
        reverse("annotation:label-ahead", args=[project.slug]), HTTP_ACCEPT="application/json"
    ).json()
    assert f'data-suggested-pick="{pick}"' in data["current"]["html"]
    assert 'data-suggested-pick="tie"' in data["next"]["html"]


def test_the_item_page_marks_a_judgement_made_with_a_suggestion(setup, client, lead):
    project, _, annotator, _ = setup
    assignment = labelling.assignment_claim(annotator=annotator, project=project)
    labelling.judgement_submit(
        annotator=annotator, assignment_id=assignment.pk, verdict=Verdict("tie"), project=project
    )
    client.force_login(lead)
    url = reverse("annotation:item", args=[project.slug, assignment.comparison_id])
    html = client.get(url).content.decode()
    assert 'data-testid="suggested">with a suggestion: Response A is better' in html


def test_a_verdict_the_screen_does_not_offer_is_no_suggestion(setup, lead):
    """Without a tie button the judge's tie on the second pair is neither shown nor recorded."""
    project, _, annotator, (first, second) = setup
    project = project_update(project=project, actor=lead, allow_ties=False)
    shown = {}
    for _ in range(2):
        assignment = labelling.assignment_claim(annotator=annotator, project=project)
        shown[assignment.comparison_id] = assignment.suggested_choice
        labelling.judgement_submit(
            annotator=annotator,
            assignment_id=assignment.pk,
            verdict=Verdict("left"),
            project=project,
        )
    assert shown == {first.pk: "a", second.pk: ""}
    recorded = dict(
        Judgement.objects.filter(annotator=annotator).values_list(
            "comparison_id", "suggested_choice"
        )
    )
    assert recorded == shown

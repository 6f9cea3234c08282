"""The task type, rating aspects, thumbs and ties on the lead's settings pages: each rule of
``annotation.services.projects._check_task_settings``, one test each, and the page itself."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotation.models import Project, ProjectEvent, TaskAnswer, TaskType
from annotation.services.projects import (
    ProjectError,
    project_create,
    project_update,
    rating_aspects_problem,
)
from tests.factories import ComparisonFactory, ProjectFactory, UserFactory
from tests.helpers.clients import logged_in
from tests.helpers.task_items import rating_project

pytestmark = pytest.mark.django_db

# What the settings page posts for a plain project (the model's defaults).
FORM = {"name": "Items", "slug": "items", "overlap": 2, "strength_scale": 3, "lease_minutes": 30,
        "gold_every": 0, "repeat_every": 0, "allow_ties": "on"}  # fmt: skip


@pytest.mark.parametrize(
    ("aspects", "problem"),
    [
        (["helpfulness", "instruction_following", "tone-2"], None),
        ([], None),
        (["Helpfulness"], "'Helpfulness' is not a slug-like name"),
        (["two words"], "'two words' is not a slug-like name"),
        (["9lives"], "'9lives' is not a slug-like name"),
        (["a" * 41], "is not a slug-like name"),
        (["tone", "style", "tone"], "tone appears more than once"),
        ([f"a{i}" for i in range(9)], "at most 8 aspects, got 9"),
        ("helpfulness", "must be a list of names"),
    ],
)
def test_aspect_names_are_at_most_eight_distinct_slugs(aspects, problem):
    found = rating_aspects_problem(aspects)
    assert (found is None) if problem is None else (problem in found)


def test_a_new_project_can_be_a_rating_project_with_aspects_and_thumbs(ml_engineer):
    project = project_create(
        actor=ml_engineer, name="R", slug="r", task_type=TaskType.RATING,
        rating_aspects=["helpfulness", "correctness"], rating_thumbs=True,
    )  # fmt: skip
    project.refresh_from_db()
    assert (project.task_type, project.rating_aspects, project.rating_thumbs) == (
        "rating", ["helpfulness", "correctness"], True,
    )  # fmt: skip
    created = ProjectEvent.objects.get(project=project).changes
    assert created["task_type"] == {"after": "rating"}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"task_type": "rating"}, "rating_aspects", "1-8 aspects, thumbs or both"),
        ({"task_type": "ranking", "rating_thumbs": True}, "rating_thumbs", "belong to rating"),
        ({"task_type": "pairwise", "rating_aspects": ["tone"]}, "rating_aspects", "belong to"),
        ({"task_type": "rating", "rating_aspects": ["Tone"]}, "rating_aspects", "slug-like"),
        ({"task_type": "votes"}, "task_type", "not a valid choice"),
    ],
)
def test_bad_task_settings_are_refused_on_their_field(ml_engineer, fields, field, message):
    with pytest.raises(ProjectError) as refused:
        project_create(actor=ml_engineer, name="R", slug="r", **fields)
    assert message in " ".join(refused.value.field_errors[field])
    assert not Project.objects.exists()


def test_the_task_type_of_an_empty_project_can_change(ml_engineer):
    project = ProjectFactory(slug="empty")
    saved = project_update(
        project=project, actor=ml_engineer, task_type=TaskType.RANKING, allow_ties=False
    )
    assert (saved.task_type, saved.allow_ties) == ("ranking", False)


@pytest.mark.parametrize("holds", ["comparisons", "items"])
def test_the_task_type_stays_once_the_project_holds_data(ml_engineer, holds):
    """A pairwise project with pairs, or a rating project with items, keeps its type: the
    refusal names what it holds, and nothing changes (no audit row either)."""
    if holds == "comparisons":
        project = ProjectFactory(slug="pairs")
        ComparisonFactory.create_batch(2, project=project)
        expected = "stays pairwise: this project already holds 2 comparisons"
    else:
        project, _ = rating_project(3)
        expected = "stays rating: this project already holds 3 items"
    events = ProjectEvent.objects.count()
    with pytest.raises(ProjectError) as refused:
        project_update(
            project=project, actor=ml_engineer, task_type=TaskType.RANKING,
            rating_aspects=[], rating_thumbs=False, name="Renamed",
        )  # fmt: skip
    assert expected in refused.value.field_errors["task_type"][0]
    project.refresh_from_db()
    assert project.task_type != TaskType.RANKING and project.name != "Renamed"
    assert ProjectEvent.objects.count() == events


def test_aspects_answers_score_stay_and_new_ones_may_be_added(ml_engineer):
    """Removing or renaming an aspect that answers score would orphan those scores: refused;
    adding one is allowed (old answers simply lack it), and is audited."""
    project, items = rating_project(1)
    TaskAnswer.objects.create(
        item=items[0], annotator=UserFactory(), order=[0],
        scores={"helpfulness": 4, "correctness": 5}, thumbs=True,
    )  # fmt: skip
    with pytest.raises(ProjectError, match="answers already score correctness"):
        project_update(project=project, actor=ml_engineer, rating_aspects=["helpfulness"])
    saved = project_update(
        project=project, actor=ml_engineer,
        rating_aspects=["helpfulness", "correctness", "tone"],
    )  # fmt: skip
    assert saved.rating_aspects == ["helpfulness", "correctness", "tone"]
    event = ProjectEvent.objects.filter(project=project).latest("id")
    assert event.changes["rating_aspects"]["after"] == ["helpfulness", "correctness", "tone"]


def test_aspects_learnt_from_an_import_may_stay_as_they_are(ml_engineer):
    """The name rule applies to aspects the lead changes: a project whose imported aspects are
    not slug-like still saves its other settings."""
    project = ProjectFactory(task_type=TaskType.RATING, rating_aspects=["Instruction Following"])
    saved = project_update(
        project=project, actor=ml_engineer, name="Renamed",
        rating_aspects=["Instruction Following"],
    )  # fmt: skip
    assert saved.name == "Renamed"


def test_settings_page_sets_task_type_aspects_and_thumbs(ml_engineer):
    ProjectFactory(slug="items", name="Items")
    client = logged_in(ml_engineer)
    url = reverse("annotation:project-settings", args=["items"])
    page = client.get(url).content.decode()
    assert 'name="task_type"' in page and 'name="rating_aspects"' in page
    assert 'name="rating_thumbs"' in page and "equal ranks" in page
    data = {**FORM, "task_type": "rating", "rating_aspects": " helpfulness , tone ",
            "rating_thumbs": "on"}  # fmt: skip
    response = client.post(url, data)
    assert response.status_code == 302
    project = Project.objects.get(slug="items")
    assert (project.task_type, project.rating_aspects, project.rating_thumbs) == (
        "rating", ["helpfulness", "tone"], True,
    )  # fmt: skip
    page = client.get(url).content.decode()
    assert 'value="helpfulness, tone"' in page


def test_settings_page_shows_a_type_change_refusal_and_changes_nothing(ml_engineer):
    project, _ = rating_project(2, slug="items", name="Items")
    client = logged_in(ml_engineer)
    url = reverse("annotation:project-settings", args=["items"])
    data = {**FORM, "task_type": "ranking", "rating_aspects": "", "name": "Renamed"}
    response = client.post(url, data)
    assert response.status_code == 200
    assert "stays rating: this project already holds 2 items" in response.content.decode()
    assert "task_type" in response.context["form"].errors
    project.refresh_from_db()
    assert (project.task_type, project.name) == ("rating", "Items")


def test_settings_page_without_task_type_keeps_it(ml_engineer):
    """An older client that posts no task type keeps the project's (a ranking stays a ranking)."""
    ProjectFactory(slug="items", name="Items", task_type=TaskType.RANKING)
    client = logged_in(ml_engineer)
    response = client.post(reverse("annotation:project-settings", args=["items"]), FORM)
    assert response.status_code == 302
    assert Project.objects.get(slug="items").task_type == "ranking"


def test_create_page_makes_a_ranking_project(ml_engineer):
    client = logged_in(ml_engineer)
    response = client.post(
        reverse("annotation:project-create"),
        {**FORM, "slug": "ranked", "task_type": "ranking", "allow_ties": ""},
    )
    assert response.status_code == 302
    project = Project.objects.get(slug="ranked")
    assert (project.task_type, project.allow_ties) == ("ranking", False)


def _rows(page: str) -> dict[str, bool]:
    """Each setting of the settings page's form -> whether its row is shown (not ``hidden``)."""
    rows = re.findall(
        r"<div( data-task-types=\"[^\"]*\")?( hidden)?[^>]*>\s*<label[^>]*for=\"id_(\w+)\"", page
    )
    return {name: not hidden for _, hidden, name in rows}


@pytest.mark.parametrize(
    ("task_type", "shown", "hidden"),
    [
        ("pairwise", {"strength_scale", "allow_both_bad", "allow_ties", "queue_order"},
         {"rating_aspects", "rating_thumbs"}),
        ("rating", {"rating_aspects", "rating_thumbs", "overlap", "gold_every"},
         {"strength_scale", "allow_both_bad", "allow_ties", "suggestion_judge", "queue_order",
          "exploration_share", "overlap_reduction", "continuous_rm"}),
        ("ranking", {"allow_ties", "overlap", "lease_minutes", "repeat_every"},
         {"strength_scale", "allow_both_bad", "rating_aspects", "rating_thumbs",
          "suggestion_judge", "continuous_rm_every"}),
    ],
)  # fmt: skip
def test_settings_page_shows_the_settings_of_the_projects_task_type(
    ml_engineer, task_type, shown, hidden
):
    """A rating project's page shows its aspects and thumbs and hides the pairwise verdict
    settings; a ranking's shows ties; a pair project's shows none of the rating fields."""
    aspects = ["helpfulness"] if task_type == "rating" else []
    ProjectFactory(slug="items", task_type=task_type, rating_aspects=aspects)
    page = logged_in(ml_engineer).get(reverse("annotation:project-settings", args=["items"]))
    rows = _rows(page.content.decode())
    assert {name for name in shown if rows[name]} == shown
    assert {name for name in hidden if not rows[name]} == hidden


def test_a_rating_form_ignores_the_pairwise_settings_it_was_sent(ml_engineer):
    """Pairwise settings posted for a rating project (even invalid ones) change nothing and
    block nothing: they keep their stored values; the rating settings are saved."""
    project, _ = rating_project(2, slug="items", name="Items", strength_scale=3)
    client = logged_in(ml_engineer)
    data = {**FORM, "task_type": "rating", "rating_aspects": "helpfulness, correctness, tone",
            "strength_scale": "not a number", "allow_both_bad": "on", "queue_order": "bogus"}  # fmt: skip
    data.pop("allow_ties")
    response = client.post(reverse("annotation:project-settings", args=["items"]), data)
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.rating_aspects == ["helpfulness", "correctness", "tone"]
    assert (project.strength_scale, project.allow_both_bad, project.allow_ties) == (3, False, True)
    assert project.queue_order == Project._meta.get_field("queue_order").default


def test_a_ranking_form_needs_no_pairwise_settings_and_saves_ties(ml_engineer):
    """A ranking project's form posts only its own fields (no strength scale): ties are saved."""
    ProjectFactory(slug="ranked", name="Ranked", task_type=TaskType.RANKING, allow_ties=True)
    data = {"name": "Ranked", "slug": "ranked", "overlap": 2, "lease_minutes": 30,
            "gold_every": 0, "repeat_every": 0, "task_type": "ranking"}  # fmt: skip
    client = logged_in(ml_engineer)
    response = client.post(reverse("annotation:project-settings", args=["ranked"]), data)
    assert response.status_code == 302
    assert Project.objects.get(slug="ranked").allow_ties is False


def test_an_empty_rating_project_turned_ranking_loses_its_aspects(ml_engineer):
    """The aspects and thumbs belong to rating projects: changing an empty rating project to
    ranking clears them (they are hidden on the page) instead of refusing the change."""
    ProjectFactory(slug="items", name="Items", task_type=TaskType.RATING,
                   rating_aspects=["helpfulness"], rating_thumbs=True)  # fmt: skip
    client = logged_in(ml_engineer)
    data = {**FORM, "task_type": "ranking", "rating_aspects": "helpfulness", "rating_thumbs": "on"}
    response = client.post(reverse("annotation:project-settings", args=["items"]), data)
    assert response.status_code == 302
    project = Project.objects.get(slug="items")
    assert (project.task_type, project.rating_aspects, project.rating_thumbs) == (
        "ranking", [], False,
    )  # fmt: skip

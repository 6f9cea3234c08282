"""The annotation admin writes only through the services, or not at all.

A superuser posts the admin's own forms with the Django test client. Project settings and members
obey annotation.services.projects (its refusals, its audit rows, its lease releases, nothing half
written); cluster names go through cluster_rename; judgements and the other records that imports,
annotators and jobs write are read only.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotation.models import (
    Assignment,
    ClusteringRun,
    Comparison,
    DatasetExport,
    ExportJob,
    GuidelinesVersion,
    ImportJob,
    Judgement,
    Project,
    ProjectEvent,
    ProjectMembership,
    Prompt,
    PromptCluster,
    Response,
)
from common.roles import ANNOTATOR
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db

Kind = ProjectEvent.Kind
SETTINGS = {
    "name": "Alpha",
    "slug": "alpha",
    "guidelines": "Pick the more helpful answer.",
    "overlap": "3",
    "allow_ties": "on",
    "strength_scale": "3",
    "lease_minutes": "30",
    "gold_every": "0",
    "repeat_every": "0",
    "suggestion_judge": "",
    # the queue and reward-model settings at their defaults, as the admin's form submits them
    "queue_order": "balanced",
    "exploration_share": "0.2",
    "continuous_rm_every": "50",
    "continuous_rm_ensemble_size": "5",
    # the task type at its default, as the admin's form submits it (no aspects, no thumbs)
    "task_type": "pairwise",
    "rating_aspects": "",
}


@pytest.fixture
def root(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def admin_client(root) -> Client:
    return logged_in(root)


@pytest.fixture
def project() -> Project:
    return ProjectFactory(
        name="Alpha", slug="alpha", guidelines=SETTINGS["guidelines"], gold_every=0, repeat_every=0
    )


def _members(project: Project, *, add: list[tuple[int, str]] = (), delete: tuple[int, ...] = ()):
    """The members inline's POST fields: the project's rows (``delete``: user ids ticked for
    deletion), then one new row per (user id, role) in ``add``."""
    rows = list(ProjectMembership.objects.filter(project=project.pk).order_by("pk"))
    data = {
        "memberships-TOTAL_FORMS": str(len(rows) + len(add)),
        "memberships-INITIAL_FORMS": str(len(rows)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    for i, row in enumerate(rows):
        data[f"memberships-{i}-id"] = str(row.pk)
        data[f"memberships-{i}-project"] = str(project.pk)
        if row.user_id in delete:
            data[f"memberships-{i}-DELETE"] = "on"
    for j, (user_id, role) in enumerate(add, start=len(rows)):
        data[f"memberships-{j}-project"] = str(project.pk) if project.pk else ""
        data[f"memberships-{j}-user"] = str(user_id)
        data[f"memberships-{j}-role"] = role
        # What the admin's form asked for before the change (the model's field, editable then).
        data[f"memberships-{j}-added_at_0"] = "2026-01-01"
        data[f"memberships-{j}-added_at_1"] = "12:00:00"
    return data


def _change(client: Client, project: Project, **fields: str) -> object:
    data = {**SETTINGS, **fields, **_members(project)}
    return client.post(f"/admin/annotation/project/{project.pk}/change/", data)


# --- project settings ----------------------------------------------------------------------------


def test_a_person_as_suggestion_judge_is_refused_with_the_services_message(admin_client, project):
    """Only a model judge of this project may suggest (the service's rule, not the model's): the
    admin shows the service's message on the field, and the project keeps no judge."""
    person = UserFactory(username="pat", role=ANNOTATOR)
    page = _change(admin_client, project, suggestion_judge=str(person.pk))
    assert page.status_code == 200
    errors = page.context["adminform"].form.errors
    assert errors["suggestion_judge"] == [
        "must be the machine account of a model judge that judged this project's pairs (the "
        "judges page lists them); leave it empty for no suggestions"
    ]
    project.refresh_from_db()
    assert project.suggestion_judge_id is None
    assert not ProjectEvent.objects.filter(project=project).exists()


def test_a_settings_edit_in_the_admin_is_audited_like_the_settings_page(
    admin_client, project, root
):
    """Overlap 3 -> 2 and a new guidelines text: one "edited" audit row by the superuser with the
    before and after of both, and the guidelines get numbered versions (1: the old text, 2: the new)."""
    page = _change(admin_client, project, overlap="2", guidelines="Prefer the shorter answer.")
    assert page.status_code == 302
    project.refresh_from_db()
    assert (project.overlap, project.guidelines) == (2, "Prefer the shorter answer.")
    event = ProjectEvent.objects.get(project=project)
    assert (event.kind, event.actor) == (Kind.EDITED, root)
    assert event.changes == {
        "overlap": {"before": 3, "after": 2},
        "guidelines": {
            "before": "Pick the more helpful answer.",
            "after": "Prefer the shorter answer.",
        },
    }
    versions = GuidelinesVersion.objects.filter(project=project).order_by("number")
    assert [(v.number, v.text) for v in versions] == [
        (1, "Pick the more helpful answer."),
        (2, "Prefer the shorter answer."),
    ]


def test_the_admin_sets_a_rating_project_and_refuses_bad_aspects_on_their_field(admin_client):
    """The admin's project form takes the task type, aspects (names separated by commas) and
    thumbs, with the settings page's rules: a bad aspect name is refused on its field, unsaved."""
    data = {**SETTINGS, "slug": "rated", "name": "Rated", "task_type": "rating"}
    data.pop("suggestion_judge")
    data.update(_members(Project()))
    page = admin_client.post(
        "/admin/annotation/project/add/", {**data, "rating_aspects": "helpfulness, Tone"}
    )
    assert page.status_code == 200 and "rating_aspects" in page.context["adminform"].form.errors
    assert not Project.objects.filter(slug="rated").exists()
    page = admin_client.post(
        "/admin/annotation/project/add/",
        {**data, "rating_aspects": "helpfulness, tone", "rating_thumbs": "on"},
    )
    assert page.status_code == 302
    project = Project.objects.get(slug="rated")
    assert (project.task_type, project.rating_aspects, project.rating_thumbs) == (
        "rating", ["helpfulness", "tone"], True,
    )  # fmt: skip


def test_a_project_added_in_the_admin_is_created_by_the_service(admin_client, root):
    """The add form calls project_create: the creator is recorded, a "created" audit row holds the
    values, and the guidelines are version 1."""
    data = {**SETTINGS, "slug": "beta", "name": "Beta"}
    data.pop("suggestion_judge")
    data.update(_members(Project()))
    page = admin_client.post("/admin/annotation/project/add/", data)
    assert page.status_code == 302
    project = Project.objects.get(slug="beta")
    assert project.created_by == root
    assert list(ProjectEvent.objects.filter(project=project).values_list("kind", flat=True)) == [
        Kind.CREATED
    ]
    assert list(
        GuidelinesVersion.objects.filter(project=project).values_list("number", "text")
    ) == [(1, "Pick the more helpful answer.")]


def test_a_project_cannot_be_deleted_in_the_admin_only_archived(admin_client, project, root):
    """Deleting a project would delete its judgements: the delete page is refused (403) and the
    project and its judgement stay. The Archive action calls project_archive (audited)."""
    judgement = JudgementFactory(comparison=ComparisonFactory(project=project))
    assert admin_client.get(f"/admin/annotation/project/{project.pk}/delete/").status_code == 403
    assert (
        admin_client.post(
            f"/admin/annotation/project/{project.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    assert Judgement.objects.filter(pk=judgement.pk).exists()
    page = admin_client.post(
        "/admin/annotation/project/",
        {"action": "archive", "_selected_action": [str(project.pk)]},
    )
    assert page.status_code == 302
    project.refresh_from_db()
    assert project.archived_at is not None
    event = ProjectEvent.objects.get(project=project)
    assert (event.kind, event.actor) == (Kind.ARCHIVED, root)


# --- members -------------------------------------------------------------------------------------


def test_a_member_added_in_the_admin_gets_the_role_and_an_audit_row(admin_client, project, root):
    """member_add runs: the new annotator gets the global Annotator role the labelling screen asks
    for, the row records who added them, and a "member_added" audit row says so."""
    pat = UserFactory(username="pat")
    assert not pat.groups.exists()
    data = {**SETTINGS, **_members(project, add=[(pat.pk, "annotator")])}
    page = admin_client.post(f"/admin/annotation/project/{project.pk}/change/", data)
    assert page.status_code == 302
    membership = ProjectMembership.objects.get(project=project, user=pat)
    assert (membership.role, membership.added_by) == ("annotator", root)
    assert list(pat.groups.values_list("name", flat=True)) == [ANNOTATOR]
    event = ProjectEvent.objects.get(project=project)
    assert (event.kind, event.subject, event.changes) == (
        Kind.MEMBER_ADDED, "pat", {"role": {"after": "annotator"}}
    )  # fmt: skip


def test_a_deactivated_account_is_refused_and_nothing_of_the_submission_is_saved(
    admin_client, project
):
    """member_add refuses a deactivated account that has a password; the same submission's
    overlap change is rolled back with it, and the service's message is shown."""
    gone = UserFactory(username="gone", is_active=False)
    data = {**SETTINGS, "overlap": "5", **_members(project, add=[(gone.pk, "annotator")])}
    page = admin_client.post(f"/admin/annotation/project/{project.pk}/change/", data, follow=True)
    assert [str(m) for m in page.context["messages"]] == [
        "Nothing was saved: the account gone is deactivated"
    ]
    project.refresh_from_db()
    assert project.overlap == 3
    assert not ProjectMembership.objects.filter(project=project).exists()
    assert not ProjectEvent.objects.filter(project=project).exists()


def test_a_member_removed_in_the_admin_has_their_lease_released(admin_client, project):
    """member_remove runs: the member's active lease is deleted and its overlap slot given back
    (taken 1 -> 0), their judgement elsewhere in the project is kept, and it is audited."""
    annie = UserFactory(username="annie", role=ANNOTATOR)
    project.members.add(annie)
    held, judged = ComparisonFactory(project=project, taken=1), ComparisonFactory(project=project)
    Assignment.objects.create(
        comparison=held, annotator=annie, shown_left="a",
        expires_at=timezone.now() + timedelta(minutes=30),
    )  # fmt: skip
    JudgementFactory(comparison=judged, annotator=annie)
    data = {**SETTINGS, **_members(project, delete=(annie.pk,))}
    page = admin_client.post(f"/admin/annotation/project/{project.pk}/change/", data)
    assert page.status_code == 302
    assert not ProjectMembership.objects.filter(project=project).exists()
    assert not Assignment.objects.filter(annotator=annie).exists()
    held.refresh_from_db()
    assert held.taken == 0
    assert Judgement.objects.filter(annotator=annie).count() == 1
    event = ProjectEvent.objects.get(project=project)
    assert (event.kind, event.subject, event.changes["released_leases"]) == (
        Kind.MEMBER_REMOVED, "annie", 1
    )  # fmt: skip


# --- judgements and the other read-only records --------------------------------------------------


def test_a_judgement_cannot_be_edited_or_deleted_in_the_admin(admin_client):
    """Nothing a user submitted is ever lost: the change and delete posts are refused (403) and
    the judgement keeps its choice; its page still opens, read only."""
    judgement = JudgementFactory(choice="a", strength=2)
    url = f"/admin/annotation/judgement/{judgement.pk}"
    assert admin_client.get(f"{url}/change/").status_code == 200
    changed = admin_client.post(
        f"{url}/change/",
        {
            "comparison": judgement.comparison_id,
            "annotator": judgement.annotator_id,
            "choice": "b",
            "strength": "1",
            "shown_left": "a",
        },
    )
    assert changed.status_code == 403
    assert admin_client.post(f"{url}/delete/", {"post": "yes"}).status_code == 403
    judgement.refresh_from_db()
    assert (judgement.choice, judgement.strength) == ("a", 2)


def _records() -> dict[str, object]:
    """One object of each model the admin only shows."""
    comparison = ComparisonFactory()
    annie = UserFactory(username="annie", role=ANNOTATOR)
    run = ClusteringRun.objects.create(
        project=comparison.project, model_name="m", status=ClusteringRun.Status.SUCCEEDED
    )
    return {
        "prompt": comparison.prompt,
        "response": comparison.response_a,
        "comparison": comparison,
        "judgement": JudgementFactory(comparison=comparison, annotator=annie),
        "assignment": Assignment.objects.create(
            comparison=comparison,
            annotator=UserFactory(username="bob"),
            shown_left="b",
            expires_at=timezone.now() + timedelta(minutes=30),
        ),
        "importjob": ImportJob.objects.create(
            project=comparison.project, path="/nowhere", original_name="a.jsonl", size_bytes=10
        ),
        "datasetexport": DatasetExport.objects.create(
            project=comparison.project,
            sha256="0" * 64,
            folder="/nowhere",
            n_pairs=1,
            n_judgements=1,
        ),
        "clusteringrun": run,
        "exportjob": ExportJob.objects.create(project=comparison.project),
    }


MODELS = {
    "prompt": Prompt,
    "response": Response,
    "comparison": Comparison,
    "judgement": Judgement,
    "assignment": Assignment,
    "importjob": ImportJob,
    "datasetexport": DatasetExport,
    "clusteringrun": ClusteringRun,
    "exportjob": ExportJob,
}


@pytest.mark.parametrize("model", list(MODELS))
def test_records_written_by_imports_annotators_and_jobs_are_read_only(admin_client, model):
    """No add page (403), no delete (403, the row stays), a read-only change page (200, and a
    change post refused with 403); the list still opens."""
    record = _records()[model]
    base = f"/admin/annotation/{model}/"
    assert admin_client.get(base).status_code == 200
    assert admin_client.get(f"{base}add/").status_code == 403
    assert admin_client.get(f"{base}{record.pk}/change/").status_code == 200
    assert admin_client.post(f"{base}{record.pk}/change/", {}).status_code == 403
    assert admin_client.post(f"{base}{record.pk}/delete/", {"post": "yes"}).status_code == 403
    assert MODELS[model].objects.filter(pk=record.pk).exists()


def test_a_cluster_is_renamed_through_the_service_and_nothing_else_changes(admin_client):
    """cluster_rename trims the name; the size, share and label posted with it are ignored (the
    run wrote them); a cluster has no add or delete."""
    run = ClusteringRun.objects.create(
        project=ProjectFactory(), model_name="m", status=ClusteringRun.Status.SUCCEEDED
    )
    cluster = PromptCluster.objects.create(run=run, label=0, size=4, share=0.5)
    page = admin_client.post(
        f"/admin/annotation/promptcluster/{cluster.pk}/change/",
        {"run": run.pk, "label": "7", "name": "  Cooking ", "size": "99", "share": "1.0",
         "top_terms": "[]", "central_prompt_ids": "[]"},
    )  # fmt: skip
    assert page.status_code == 302
    cluster.refresh_from_db()
    assert (cluster.name, cluster.label, cluster.size, cluster.share) == ("Cooking", 0, 4, 0.5)
    assert admin_client.get("/admin/annotation/promptcluster/add/").status_code == 403
    assert (
        admin_client.post(
            f"/admin/annotation/promptcluster/{cluster.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )

"""Project settings and people: each rule of annotation.services.projects, one test each.

Projects here have overlap 2, no gold items, no swap repeats, so a claim is a plain pair.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from annotation.models import (
    Assignment,
    Comparison,
    Judgement,
    Project,
    ProjectEvent,
    ProjectMembership,
)
from annotation.selectors import members as project_selectors
from annotation.selectors.projects import projects_for_annotator
from annotation.services import labelling
from annotation.services.projects import (
    ProjectError,
    member_add,
    member_invite,
    member_pause,
    member_remove,
    member_resume,
    project_archive,
    project_create,
    project_unarchive,
    project_update,
)
from common.roles import ANNOTATOR, REVIEWER, has_role
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db

Kind = ProjectEvent.Kind


@pytest.fixture
def project(ml_engineer) -> Project:
    project = ProjectFactory(slug="alpha", overlap=2, gold_every=0, repeat_every=0)
    ComparisonFactory.create_batch(3, project=project)
    return project


@pytest.fixture
def member(project, annotator):
    project.members.add(annotator)
    return annotator


def _taken(project: Project) -> list[int]:
    return list(
        Comparison.objects.filter(project=project).order_by("pk").values_list("taken", flat=True)
    )


def _kinds(project: Project) -> list[str]:
    return list(
        ProjectEvent.objects.filter(project=project).order_by("id").values_list("kind", flat=True)
    )


# --- create and edit -----------------------------------------------------------------------------


def test_create_saves_the_settings_and_audits_every_value(ml_engineer):
    """A valid project is saved with its creator; one "created" row holds each value set."""
    project = project_create(
        actor=ml_engineer, name="Helpfulness", slug="helpful", overlap=4, allow_both_bad=True,
        strength_scale=2, lease_minutes=15, gold_every=0, repeat_every=5, guidelines="Be kind.",
    )  # fmt: skip
    project.refresh_from_db()
    assert (project.overlap, project.strength_scale, project.lease_minutes) == (4, 2, 15)
    assert project.created_by == ml_engineer
    event = ProjectEvent.objects.get(project=project)
    assert (event.kind, event.actor) == (Kind.CREATED, ml_engineer)
    assert event.changes["overlap"] == {"after": 4}
    assert event.changes["allow_ties"] == {"after": True}  # the model's default, recorded too


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"overlap": 0}, "overlap"),
        ({"overlap": 21}, "overlap"),
        ({"strength_scale": 4}, "strength_scale"),
        ({"lease_minutes": 0}, "lease_minutes"),
        ({"slug": "Not A Slug"}, "slug"),
        ({"slug": "alpha"}, "slug"),  # taken by the fixture's project
        ({"name": ""}, "name"),
    ],
)
def test_create_refuses_what_the_model_refuses_and_writes_nothing(
    project, ml_engineer, fields, bad_field
):
    """The model's validation (full_clean) names the field; no project, no audit row."""
    before = (Project.objects.count(), ProjectEvent.objects.count())
    with pytest.raises(ProjectError) as caught:
        project_create(actor=ml_engineer, **{"name": "New", "slug": "new", **fields})
    assert list(caught.value.field_errors) == [bad_field]
    assert bad_field in str(caught.value)
    assert (Project.objects.count(), ProjectEvent.objects.count()) == before


def test_create_refuses_a_setting_that_does_not_exist(ml_engineer):
    with pytest.raises(ProjectError, match="unknown project settings: members"):
        project_create(actor=ml_engineer, name="New", slug="new", members=[])
    assert not Project.objects.filter(slug="new").exists()


def test_update_audits_before_and_after_of_what_changed_only(project, ml_engineer):
    """Two fields changed, one given unchanged: the row holds the two, with before and after."""
    project_update(
        project=project, actor=ml_engineer, overlap=3, allow_ties=False, name=project.name
    )
    project.refresh_from_db()
    assert (project.overlap, project.allow_ties) == (3, False)
    event = ProjectEvent.objects.get(project=project, kind=Kind.EDITED)
    assert event.changes == {
        "overlap": {"before": 2, "after": 3},
        "allow_ties": {"before": True, "after": False},
    }


def test_update_with_nothing_changed_writes_no_audit_row(project, ml_engineer):
    project_update(project=project, actor=ml_engineer, overlap=2, slug="alpha")
    assert not ProjectEvent.objects.filter(project=project).exists()


def test_update_refused_changes_nothing(project, ml_engineer):
    """One bad value among good ones: no field is saved, no audit row."""
    name = project.name
    with pytest.raises(ProjectError) as caught:
        project_update(project=project, actor=ml_engineer, name="Renamed", overlap=99)
    assert list(caught.value.field_errors) == ["overlap"]
    project.refresh_from_db()
    assert (project.name, project.overlap) == (name, 2)
    assert not ProjectEvent.objects.filter(project=project).exists()


# --- archive ------------------------------------------------------------------------------------


def test_archive_stops_claims_releases_leases_keeps_data_and_hides_the_project(
    project, member, ml_engineer
):
    """After archiving: no claim, the held pair's slot is back, the judgement is still there, the
    annotator's project list no longer shows it; unarchiving lets claims resume."""
    judged = Comparison.objects.filter(project=project).order_by("pk").last()
    JudgementFactory(comparison=judged, annotator=UserFactory(role=ANNOTATOR))
    Comparison.objects.filter(pk=judged.pk).update(taken=1)
    held = labelling.assignment_claim(annotator=member, project=project)
    assert held is not None and _taken(project).count(1) == 2

    archived = project_archive(project=project, actor=ml_engineer)

    assert not Assignment.objects.filter(annotator=member).exists()
    assert _taken(project) == [0, 0, 1]
    assert labelling.assignment_claim(annotator=member, project=archived) is None
    assert (
        labelling.assignment_reserve_next(annotator=member, project=archived, current_id=0) is None
    )
    assert Judgement.objects.filter(comparison=judged).count() == 1
    assert projects_for_annotator(annotator=member) == []
    event = ProjectEvent.objects.get(project=project, kind=Kind.ARCHIVED)
    assert (event.actor, event.changes) == (ml_engineer, {"released_leases": 1})

    reopened = project_unarchive(project=project, actor=ml_engineer)
    assert labelling.assignment_claim(annotator=member, project=reopened) is not None
    assert [row.project for row in projects_for_annotator(annotator=member)] == [project]
    assert _kinds(project) == [Kind.ARCHIVED, Kind.UNARCHIVED]


def test_archive_twice_and_unarchive_an_open_project_are_refused(project, ml_engineer):
    with pytest.raises(ProjectError, match="not archived"):
        project_unarchive(project=project, actor=ml_engineer)
    project_archive(project=project, actor=ml_engineer)
    archived_at = Project.objects.get(pk=project.pk).archived_at
    with pytest.raises(ProjectError, match="already archived"):
        project_archive(project=project, actor=ml_engineer)
    assert Project.objects.get(pk=project.pk).archived_at == archived_at
    assert _kinds(project) == [Kind.ARCHIVED]


# --- members ------------------------------------------------------------------------------------


def test_add_by_username_makes_an_annotator_member_and_gives_the_role(project, ml_engineer):
    """A user with no role yet gets the Annotator role with the membership; no invite (they have
    a password); audited."""
    carla = UserFactory(username="carla")
    added = member_add(project=project, actor=ml_engineer, identifier="carla")
    assert (added.membership.role, added.invite, added.created) == ("annotator", "", False)
    assert has_role(get_user_model().objects.get(pk=carla.pk), ANNOTATOR)
    event = ProjectEvent.objects.get(project=project)
    assert (event.kind, event.subject, event.changes) == (
        Kind.MEMBER_ADDED, "carla", {"role": {"after": "annotator"}},
    )  # fmt: skip


def test_add_by_email_finds_the_account_whatever_the_case(project, ml_engineer):
    UserFactory(username="dan", email="Dan@Example.org")
    added = member_add(project=project, actor=ml_engineer, identifier="dan@example.ORG")
    assert added.membership.user.username == "dan"
    assert not added.created


def test_add_an_unknown_email_creates_an_account_with_a_one_time_invite(
    project, ml_engineer, client
):
    """The new account has no password; the invite page sets one (and logs nobody in); the link
    then stops working."""
    added = member_add(project=project, actor=ml_engineer, identifier="new.person@example.org")
    user = added.membership.user
    assert (added.created, user.username, user.has_usable_password()) == (True, "new.person", False)
    assert added.invite.startswith("/annotation/invite/")
    assert ProjectEvent.objects.get(project=project).changes["account"]["after"] == "created"

    form_page = client.get(added.invite, follow=True)
    assert form_page.context["validlink"] is True
    set_url = form_page.redirect_chain[-1][0]
    done = client.post(
        set_url, {"new_password1": "a long new secret 91", "new_password2": "a long new secret 91"}
    )
    assert done.status_code == 302 and done["Location"] == reverse("login")
    user.refresh_from_db()
    assert user.check_password("a long new secret 91") and user.is_active
    again = client.get(added.invite, follow=True)
    assert again.context["validlink"] is False


def test_invite_activates_an_imported_account(project, ml_engineer, client):
    """Imports make inactive accounts with no password; a member invite lets them in."""
    imported = get_user_model().objects.create(username="zed", is_active=False)
    imported.set_unusable_password()
    imported.save()
    project.members.add(imported)
    path = member_invite(project=project, actor=ml_engineer, username="zed")
    set_url = client.get(path, follow=True).redirect_chain[-1][0]
    client.post(
        set_url, {"new_password1": "zed's new secret 42", "new_password2": "zed's new secret 42"}
    )
    imported.refresh_from_db()
    assert imported.is_active and imported.check_password("zed's new secret 42")
    assert _kinds(project) == [Kind.INVITED]


def test_invite_is_refused_for_an_account_with_a_password(project, member, ml_engineer):
    with pytest.raises(ProjectError, match="already has a password"):
        member_invite(project=project, actor=ml_engineer, username=member.username)
    assert not ProjectEvent.objects.exists()


@pytest.mark.parametrize(
    ("identifier", "message"),
    [
        ("nobody", "no user named 'nobody'"),
        ("not-an@email", "not a valid email address"),
        ("annie", "already a member"),
        ("  ", "give a username or an email address"),
    ],
)
def test_add_refusals_change_nothing(project, member, ml_engineer, identifier, message):
    users = get_user_model().objects.count()
    with pytest.raises(ProjectError, match=message):
        member_add(project=project, actor=ml_engineer, identifier=identifier)
    assert get_user_model().objects.count() == users
    assert list(project.members.all()) == [member]
    assert not ProjectEvent.objects.exists()


def test_add_refuses_a_deactivated_account_with_a_password(project, ml_engineer):
    UserFactory(username="gone", is_active=False)
    with pytest.raises(ProjectError, match="deactivated"):
        member_add(project=project, actor=ml_engineer, identifier="gone")
    assert not ProjectMembership.objects.exists()


def test_a_reviewer_member_gets_the_reviewer_role_and_claims_nothing(project, ml_engineer):
    """Reviewer memberships are for review work: even with the Annotator role they get no pair."""
    both = UserFactory(username="rita", role=ANNOTATOR)
    member_add(project=project, actor=ml_engineer, identifier="rita", role="reviewer")
    assert has_role(get_user_model().objects.get(pk=both.pk), REVIEWER)
    assert labelling.assignment_claim(annotator=both, project=project) is None
    assert projects_for_annotator(annotator=both) == []
    with pytest.raises(ProjectError, match="only annotators are paused"):
        member_pause(project=project, actor=ml_engineer, username="rita")


def test_remove_keeps_judgements_and_releases_leases(project, member, ml_engineer):
    first = Comparison.objects.filter(project=project).order_by("pk").first()
    JudgementFactory(comparison=first, annotator=member)
    Comparison.objects.filter(pk=first.pk).update(taken=1)
    held = labelling.assignment_claim(annotator=member, project=project)
    assert held.comparison_id != first.pk

    assert member_remove(project=project, actor=ml_engineer, username=member.username) == 1

    assert not project.members.filter(pk=member.pk).exists()
    assert Judgement.objects.filter(annotator=member).count() == 1
    assert not Assignment.objects.filter(annotator=member).exists()
    assert _taken(project) == [1, 0, 0]
    event = ProjectEvent.objects.get(project=project)
    assert (event.kind, event.subject, event.changes) == (
        Kind.MEMBER_REMOVED, "annie", {"role": {"before": "annotator"}, "released_leases": 1},
    )  # fmt: skip


def test_pause_releases_leases_stops_claims_keeps_judgements_and_resume_restores(
    project, member, ml_engineer
):
    """The pair on screen and the one reserved ahead are both released (slots back); no claim
    while paused; the judgement stays; after resume the annotator claims again."""
    first = Comparison.objects.filter(project=project).order_by("pk").first()
    JudgementFactory(comparison=first, annotator=member)
    Comparison.objects.filter(pk=first.pk).update(taken=1)
    current = labelling.assignment_claim(annotator=member, project=project)
    labelling.assignment_reserve_next(annotator=member, project=project, current_id=current.pk)
    assert _taken(project) == [1, 1, 1]

    assert member_pause(project=project, actor=ml_engineer, username="annie") == 2

    assert _taken(project) == [1, 0, 0]
    assert not Assignment.objects.filter(annotator=member, status="active").exists()
    assert labelling.assignment_claim(annotator=member, project=project) is None
    assert Judgement.objects.filter(annotator=member).count() == 1
    assert ProjectMembership.objects.get(user=member).paused_at is not None
    with pytest.raises(ProjectError, match="already paused"):
        member_pause(project=project, actor=ml_engineer, username="annie")

    member_resume(project=project, actor=ml_engineer, username="annie")
    assert labelling.assignment_claim(annotator=member, project=project) is not None
    with pytest.raises(ProjectError, match="not paused"):
        member_resume(project=project, actor=ml_engineer, username="annie")
    assert _kinds(project) == [Kind.MEMBER_PAUSED, Kind.MEMBER_RESUMED]
    assert ProjectEvent.objects.get(kind=Kind.MEMBER_PAUSED).changes == {"released_leases": 2}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_pause_waits_for_a_claim_in_flight_and_releases_its_lease(ml_engineer):
    """A claim holds the membership row until it commits; a pause asked meanwhile waits for it and
    then releases the lease it made, so a paused annotator never keeps a pair (PostgreSQL)."""
    if not connection.features.has_select_for_update:
        pytest.skip("row locks: PostgreSQL")
    project = ProjectFactory(slug="race", overlap=1, gold_every=0, repeat_every=0)
    ComparisonFactory.create_batch(2, project=project)
    annie = UserFactory(username="annie", role=ANNOTATOR)
    project.members.add(annie)
    claimed, leases = threading.Event(), []

    def claim_then_linger() -> None:
        try:
            with transaction.atomic():
                leases.append(labelling.assignment_claim(annotator=annie, project=project))
                claimed.set()
                time.sleep(0.5)  # the pause starts now and must wait for this commit
        finally:
            connection.close()

    claimer = threading.Thread(target=claim_then_linger)
    claimer.start()
    assert claimed.wait(30)
    started = time.monotonic()
    released = member_pause(project=project, actor=ml_engineer, username="annie")
    waited = time.monotonic() - started
    claimer.join(30)

    assert leases[0] is not None
    assert (released, waited > 0.2) == (1, True)
    assert not Assignment.objects.filter(annotator=annie).exists()
    assert _taken(project) == [0, 0]


def test_pause_of_someone_not_in_the_project_is_refused(project, ml_engineer):
    UserFactory(username="outsider", role=ANNOTATOR)
    with pytest.raises(ProjectError, match="'outsider' is not a member of alpha"):
        member_pause(project=project, actor=ml_engineer, username="outsider")


# --- reads ----------------------------------------------------------------------------------------


def test_member_activity_counts_all_recent_and_last_active(project, member, reviewer, ml_engineer):
    """Three judgements, one made ten days ago: 3 in all, 2 in the last seven days; the reviewer
    member has none; agreement is n/a while the dashboard was never computed."""
    pairs = list(Comparison.objects.filter(project=project).order_by("pk"))
    for pair in pairs:
        JudgementFactory(comparison=pair, annotator=member)
    old = timezone.now() - timedelta(days=10)
    Judgement.objects.filter(comparison=pairs[0]).update(created_at=old, updated_at=old)
    member_add(project=project, actor=ml_engineer, identifier="rev", role="reviewer")

    rows = {row.username: row for row in project_selectors.project_members(project=project)}
    annie, rev = rows["annie"], rows["rev"]
    assert (annie.role, annie.judgements, annie.recent) == ("annotator", 3, 2)
    assert annie.agreement is None
    assert (
        annie.last_active
        == Judgement.objects.filter(annotator=member).latest("updated_at").updated_at
    )
    assert (rev.role, rev.judgements, rev.recent, rev.last_active) == ("reviewer", 0, 0, None)


def test_audit_log_is_paged_newest_first(project, member, ml_engineer):
    for _ in range(15):
        member_pause(project=project, actor=ml_engineer, username="annie")
        member_resume(project=project, actor=ml_engineer, username="annie")
    first = project_selectors.project_events(project=project, page=1)
    second = project_selectors.project_events(project=project, page="2")
    assert (len(first), len(second), first.paginator.num_pages) == (25, 5, 2)
    assert first[0].kind == Kind.MEMBER_RESUMED
    assert first[0].pk > first[24].pk > second[0].pk
    assert project_selectors.project_events(project=project, page="x").number == 1


# --- pages ----------------------------------------------------------------------------------------


def test_settings_page_shows_the_models_error_on_the_field_and_changes_nothing(
    project, ml_engineer
):
    client = logged_in(ml_engineer)
    url = reverse("annotation:project-settings", args=["alpha"])
    data = {"name": "Renamed", "slug": "alpha", "overlap": 0, "strength_scale": 3, "lease_minutes": 30,
            "gold_every": 0, "repeat_every": 0, "allow_ties": "on"}  # fmt: skip
    response = client.post(url, data)
    assert response.status_code == 200
    assert "overlap" in response.context["form"].errors
    assert "greater than or equal to 1" in response.content.decode()
    project.refresh_from_db()
    assert (project.name, project.overlap) != ("Renamed", 0)
    assert not ProjectEvent.objects.exists()

    response = client.post(url, {**data, "overlap": 5, "slug": "beta"})
    assert response.status_code == 302 and response["Location"] == "/annotation/p/beta/settings/"
    page = client.get(response["Location"]).content.decode()
    assert "Settings edited" in page and "Renamed" in page


def test_create_page_creates_and_opens_the_people_page(ml_engineer):
    client = logged_in(ml_engineer)
    response = client.post(
        reverse("annotation:project-create"),
        {"name": "Gamma", "slug": "gamma", "overlap": 1, "strength_scale": 1, "lease_minutes": 5,
         "gold_every": 0, "repeat_every": 0},
    )  # fmt: skip
    assert response.status_code == 302 and response["Location"] == "/annotation/p/gamma/members/"
    project = Project.objects.get(slug="gamma")
    assert (project.overlap, project.allow_ties, project.created_by) == (1, False, ml_engineer)


def test_people_page_adds_by_email_and_shows_the_invite_link(project, ml_engineer):
    client = logged_in(ml_engineer)
    url = reverse("annotation:project-members", args=["alpha"])
    response = client.post(url, {"identifier": "eve@example.org", "role": "annotator"}, follow=True)
    body = response.content.decode()
    assert "One-time invite link for eve" in body
    assert "http://testserver/annotation/invite/" in body
    assert 'data-member="eve"' in body

    again = client.post(url, {"identifier": "eve@example.org", "role": "annotator"})
    assert again.status_code == 200 and "already a member" in again.content.decode()


def test_member_agreement_comes_from_the_computed_dashboard(project, member, ml_engineer):
    """Four annotators on three pairs; carl always disagrees with the other three: against the
    others' majority annie, bea and cleo agree on 3 of 3 pairs (1.0), carl on none (0.0). With no
    dashboard computed the column is empty (the page never computes one)."""
    from django.core.cache import cache

    from annotation.services.agreement import dashboard_refresh

    others = [UserFactory(username=name, role=ANNOTATOR) for name in ("bea", "cleo", "carl")]
    project.members.add(*others)
    for pair in Comparison.objects.filter(project=project):
        for user in (member, *others):
            JudgementFactory(
                comparison=pair, annotator=user, choice="b" if user.username == "carl" else "a"
            )
    cache.clear()
    assert {r.agreement for r in project_selectors.project_members(project=project)} == {None}
    dashboard_refresh(project=project, n_boot=20, pair_boot=10)
    rows = project_selectors.project_members(project=project)
    assert {r.username: r.agreement for r in rows} == {
        "annie": 1.0, "bea": 1.0, "cleo": 1.0, "carl": 0.0,
    }  # fmt: skip


def test_a_paused_annotator_is_told_so_on_the_label_page_and_an_archived_project_says_so(
    project, member, ml_engineer
):
    """The label page with no pair says why: paused by the lead, or the project archived; with
    neither, the usual "nothing left"."""
    path = reverse("annotation:label", args=[project.slug])
    member_pause(project=project, actor=ml_engineer, username=member.username)
    page = logged_in(member).get(path)
    assert page.status_code == 200
    assert b'data-testid="paused"' in page.content and b"Nothing left" not in page.content

    member_resume(project=project, actor=ml_engineer, username=member.username)
    project_archive(project=project, actor=ml_engineer)
    page = logged_in(member).get(path)
    assert b'data-testid="archived"' in page.content

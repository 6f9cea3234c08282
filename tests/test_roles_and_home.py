"""Roles are groups made by a migration; the home page sends each role to its work."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from common.roles import ALL_ROLES, ANNOTATOR, ML_ENGINEER, REVIEWER, has_role, user_roles
from tests.factories import ProjectFactory, UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db


def test_migration_creates_the_three_role_groups():
    """Annotator, Reviewer and ML engineer exist after migrate, without any fixture."""
    assert set(Group.objects.values_list("name", flat=True)) >= set(ALL_ROLES)


def test_ml_engineer_group_holds_the_apps_permissions():
    """After migrate, ML engineers may manage every Concord model in the admin."""
    group = Group.objects.get(name=ML_ENGINEER)
    codenames = set(group.permissions.values_list("codename", flat=True))
    assert {"add_project", "change_comparison", "view_judgement"} <= codenames
    expected = Permission.objects.filter(content_type__app_label="annotation").count()
    assert group.permissions.filter(content_type__app_label="annotation").count() == expected


def test_ml_engineer_role_makes_the_user_staff(ml_engineer):
    """The admin is the ML engineer's tool, so the role grants staff status."""
    assert ml_engineer.is_staff
    assert has_role(ml_engineer, ML_ENGINEER)


def test_superuser_holds_every_role_and_anonymous_none():
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    assert user_roles(admin) == frozenset(ALL_ROLES)
    from django.contrib.auth.models import AnonymousUser

    assert user_roles(AnonymousUser()) == frozenset()


def test_unknown_role_is_an_error(annotator):
    with pytest.raises(ValueError, match="unknown role 'Boss'"):
        has_role(annotator, "Boss")


def test_anonymous_home_redirects_to_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


@pytest.mark.parametrize(
    ("role", "target"),
    [
        (ANNOTATOR, "annotation:my-projects"),
        (REVIEWER, "monitoring:review-home"),
        (ML_ENGINEER, "annotation:project-overview"),
    ],
)
def test_home_sends_each_role_to_its_work(role, target):
    user = UserFactory(role=role)
    response = logged_in(user).get("/")
    assert response.status_code == 302
    assert response.url == reverse(target)


def test_user_without_role_is_told_what_to_do():
    user = UserFactory(username="newcomer")
    response = logged_in(user).get("/")
    assert response.status_code == 200
    assert "has no role yet" in response.content.decode()


def test_navigation_lists_only_the_users_roles(annotator):
    """An annotator sees Label, not Review or Admin."""
    page = logged_in(annotator).get(reverse("annotation:my-projects")).content.decode()
    assert ">Label<" in page
    assert ">Review<" not in page and ">Admin<" not in page


def test_annotator_sees_only_projects_they_belong_to(annotator):
    mine = ProjectFactory(name="Mine")
    ProjectFactory(name="Someone else's")
    mine.members.add(annotator)
    page = logged_in(annotator).get(reverse("annotation:my-projects")).content.decode()
    assert "Mine" in page and "Someone else" not in page


@pytest.mark.parametrize(
    ("url", "allowed", "denied"),
    [
        ("annotation:project-overview", ML_ENGINEER, ANNOTATOR),
        ("monitoring:review-home", REVIEWER, ANNOTATOR),
        ("annotation:my-projects", ANNOTATOR, REVIEWER),
    ],
)
def test_role_pages_refuse_other_roles(url, allowed, denied):
    assert logged_in(UserFactory(role=allowed)).get(reverse(url)).status_code == 200
    assert logged_in(UserFactory(role=denied)).get(reverse(url)).status_code == 403


def test_admin_is_open_to_ml_engineers_only(ml_engineer, annotator):
    assert logged_in(ml_engineer).get("/admin/").status_code == 200
    assert logged_in(annotator).get("/admin/").status_code == 302  # to the admin login


def test_login_page_logs_in_with_password(client, annotator):
    response = client.post(
        reverse("login"), {"username": "annie", "password": "correct horse battery"}
    )
    assert response.status_code == 302 and response.url == reverse("home")


def test_inactive_imported_annotator_cannot_log_in(client):
    """Accounts created by an import stay closed until an admin activates them."""
    user = UserFactory(username="imported", is_active=False)
    user.set_unusable_password()
    user.save()
    response = client.post(reverse("login"), {"username": "imported", "password": ""})
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_api_schema_is_served(ml_engineer):
    response = logged_in(ml_engineer).get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200


def test_member_project_brings_the_users_roles_in_the_same_query(django_assert_num_queries):
    """The labelling pages' membership check reads the project and the user's roles in one query;
    the roles it remembers are the ones ``user_roles`` reads, and a non-member gets None."""
    from django.contrib.auth import get_user_model

    from annotation.selectors.projects import member_project

    project = ProjectFactory(slug="mine")
    ProjectFactory(slug="theirs")
    both = UserFactory(role=ANNOTATOR)
    Group.objects.get(name=REVIEWER).user_set.add(both)
    project.members.add(both)
    user = get_user_model().objects.get(pk=both.pk)
    with django_assert_num_queries(1):
        assert member_project(user=user, slug="mine") == project
        assert user_roles(user) == frozenset({ANNOTATOR, REVIEWER})
    fresh = get_user_model().objects.get(pk=both.pk)
    assert user_roles(fresh) == frozenset({ANNOTATOR, REVIEWER})
    assert member_project(user=user, slug="theirs") is None
    assert member_project(user=user, slug="nowhere") is None


def test_role_required_refuses_unknown_roles_when_a_view_is_declared():
    """A typo in a role name fails at import time, not as a page nobody can open."""
    from common.roles import role_required

    with pytest.raises(ValueError, match="roles must be some of"):
        role_required("ML engineers")
    with pytest.raises(ValueError, match="roles must be some of"):
        role_required()


def test_superuser_lands_on_every_roles_work():
    """A superuser holds every role: the home page shows each role's work, not "not a member"."""
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    ProjectFactory(name="Lead me")
    client = logged_in(admin)
    response = client.get("/")
    assert response.status_code == 302 and response.url == reverse("monitoring:every-role-home")
    page = client.get(response.url).content.decode()
    for section in ("hub-label", "hub-review", "hub-projects", "hub-runs"):
        assert f'data-testid="{section}"' in page
    assert "Lead me" in page and "not a member of any project" in page

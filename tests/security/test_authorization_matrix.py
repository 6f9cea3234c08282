"""Authorization matrix: every URL pattern x method x role, with the status each must answer.

The URL list is walked from the resolver, not written by hand: a new URL without an entry in MATRIX
(or ADMIN_MODEL_RULES for admin model pages) fails ``test_every_url_pattern_has_an_entry``.

Roles: anonymous, annotator (annie, member of project ``own`` only), reviewer, ML engineer (staff with
the model permissions of the Concord apps), superuser. Statuses: 200 page, 302 redirect (to a login page
or post/redirect/get), 400 bad input, 403 forbidden, 404 hidden, 405 wrong method, 201/202 created.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.db import transaction
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver

from tests.helpers.security_world import BOB_SECRET, World, world_build

# Every test here reads the database (and declaring it makes pytest-django create the test database
# before the module-scoped world is built).
pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "annotator", "reviewer", "ml_engineer", "superuser")


def url_patterns(resolver: URLResolver | None = None, prefix: str = "", ns: str = ""):
    """Yield (qualified name, route) for every pattern; unnamed ones are named by their route."""
    resolver = resolver or get_resolver()
    for item in resolver.url_patterns:
        if isinstance(item, URLResolver):
            yield from url_patterns(
                item,
                prefix + str(item.pattern),
                ns + (f"{item.namespace}:" if item.namespace else ""),
            )
        elif isinstance(item, URLPattern):
            route = prefix + str(item.pattern)
            yield (ns + item.name if item.name else f"{ns}<{route}>"), route


def _admin_object_id(model_key: str) -> str:
    """The pk of an existing object of the admin model ``app_model`` (admin:<app>_<model>_...)."""
    for model in admin.site._registry:
        if f"{model._meta.app_label}_{model._meta.model_name}" == model_key:
            return str(model._default_manager.order_by("pk").values_list("pk", flat=True)[0])
    raise LookupError(model_key)


ADMIN_MODEL_ACTIONS = ("changelist", "add", "history", "delete", "password_change", "change")


def path_for(name: str, route: str, w: World) -> str:
    """The URL of pattern ``name``, its parameters filled with objects of the world ``w``."""
    slug = w.own.slug
    fill = {
        "slug": slug,
        "job_id": str(w.import_job.pk),
        "sha256": w.export_sha256,
        "part": "pairs",
        "assignment_id": str(w.annie_assignment.pk),
        "lease_id": str(w.annie_assignment.pk),  # no such item lease: the screen says so
        "cluster_id": str(w.cluster.pk),
        "username": "bob",
        "run_id": str(w.run.pk),
        "round_id": str(w.eval_round.pk),
        "uidb64": "MQ",
        "token": "not-a-valid-token",
        "comparison_id": str(w.annie_assignment.comparison_id),
        "judge_id": str(w.judge.pk),
        "token_id": str(w.annie_token.pk),
        "export_job_id": str(w.export_job.pk),
    }
    if name.startswith("admin:"):
        short = name.removeprefix("admin:")
        if short == "view_on_site":
            from django.contrib.contenttypes.models import ContentType

            ct = ContentType.objects.get_for_model(type(w.own))
            return f"/admin/r/{ct.pk}/{w.own.pk}/"
        if short == "app_list":
            return "/admin/annotation/"
        if short.startswith("<"):
            if "(?P<url>" in route:
                return "/admin/no-such-page/"
            # admin/<app>/<model>/<path:object_id>/ : the old-style change URL (redirects)
            app, model = route.split("/")[1:3]
            return f"/admin/{app}/{model}/{_admin_object_id(f'{app}_{model}')}/"
        for action in ADMIN_MODEL_ACTIONS:
            if short.endswith("_" + action) and short != "password_change":
                model_key = short.removesuffix("_" + action)
                object_id = (
                    _admin_object_id(model_key) if action not in ("changelist", "add") else ""
                )
                return "/" + route.replace("<path:object_id>", object_id).replace("<id>", object_id)
    path = route
    for key, value in fill.items():
        for conv in ("slug", "int", "str", "path"):
            path = path.replace(f"<{conv}:{key}>", value)
    assert "<" not in path, (name, path)
    return "/" + path


def client_for(role: str, w: World) -> Client:
    client = Client(raise_request_exception=False)  # a 500 is a status in the table, not a crash
    if role != "anonymous":
        client.force_login(w.users[role])
    return client


# Expected status per role, in ROLES order: (anonymous, annotator, reviewer, ML engineer, superuser).
# "get"/"post" give the statuses for that method; a method the view refuses answers 405 once the user
# got past the login check. Anonymous users are sent to a login page (302) by every page; the API
# answers 401 with a ``WWW-Authenticate: Bearer`` challenge (send a personal API token). Pages of a
# project the user may not see answer 404, so a project's existence is not revealed.
LOGIN = 302
MATRIX: dict[str, dict[str, tuple[int, int, int, int, int]]] = {
    "home":                           {"get": (302, 302, 302, 302, 302), "post": (302, 302, 302, 302, 302)},
    "favicon":                        {"get": (302, 302, 302, 302, 302), "post": (302, 302, 302, 302, 302)},
    "login":                          {"get": (200, 302, 302, 302, 302), "post": (200, 302, 302, 302, 302)},
    "logout":                         {"get": (405, 405, 405, 405, 405), "post": (302, 302, 302, 302, 302)},
    # The user's own page (API tokens): an empty POST is an invalid token form (400). The token is
    # annie's: only she may revoke it; anyone else's attempt answers 404.
    "account":                        {"get": (302, 200, 200, 200, 200), "post": (302, 400, 400, 400, 400)},
    "account-token-revoke":           {"get": (302, 405, 405, 405, 405), "post": (302, 302, 404, 404, 404)},
    # Single sign-on is off in the tests' settings: both steps answer 404 (GET only: 405 for POST).
    # test_single_sign_on_urls_when_configured covers them switched on.
    "sso-login":                      {"get": (404, 404, 404, 404, 404), "post": (405, 405, 405, 405, 405)},
    "sso-callback":                   {"get": (404, 404, 404, 404, 404), "post": (405, 405, 405, 405, 405)},
    "annotation:my-projects":         {"get": (302, 200, 403, 403, 200), "post": (302, 200, 403, 403, 200)},
    "annotation:project-overview":    {"get": (302, 403, 200, 200, 200), "post": (302, 403, 200, 200, 200)},
    "annotation:project-manage":      {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:import-upload":       {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:import-status":       {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    # Cancel (POST only): back to the Manage page, with the reason when the job has finished.
    "annotation:import-cancel":       {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:export-create":       {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:export-download":     {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    # An export job's page and its status (JSON) for the page's polling: project leads only.
    "annotation:export-job":          {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:export-job-status":   {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    # Cancel (POST only): the world's job has failed, so the page comes back with the reason.
    "annotation:export-job-cancel":   {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    # The superuser counts as an annotator but is no member of the project: 404, like any outsider.
    "annotation:label":               {"get": (302, 200, 404, 404, 404), "post": (302, 200, 404, 404, 404)},
    "annotation:label-edit-last":     {"get": (302, 302, 404, 404, 404), "post": (302, 302, 404, 404, 404)},
    "annotation:label-submit":        {"get": (302, 405, 405, 405, 405), "post": (302, 302, 404, 404, 404)},
    "annotation:label-skip":          {"get": (302, 405, 405, 405, 405), "post": (302, 302, 404, 404, 404)},
    "annotation:item-submit":         {"get": (302, 405, 405, 405, 405), "post": (302, 302, 404, 404, 404)},
    # Undo on the item screens: a member without an answer this session is sent back to Label.
    "annotation:item-edit-last":      {"get": (302, 302, 404, 404, 404), "post": (302, 302, 404, 404, 404)},
    "annotation:item-skip":           {"get": (302, 405, 405, 405, 405), "post": (302, 302, 404, 404, 404)},
    "annotation:label-ahead":         {"get": (302, 405, 405, 405, 405), "post": (302, 200, 404, 404, 404)},
    "annotation:label-history":       {"get": (302, 200, 404, 404, 404), "post": (302, 405, 405, 405, 405)},
    "annotation:clusters":            {"get": (302, 404, 404, 200, 200), "post": (302, 405, 405, 405, 405)},
    "annotation:clusters-status":     {"get": (302, 404, 404, 200, 200), "post": (302, 405, 405, 405, 405)},
    "annotation:clusters-recluster":  {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:cluster-rename":      {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:agreement":           {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:agreement-data":      {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:agreement-refresh":   {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:agreement-annotator": {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    # The project lead's settings and people pages (ML engineers; the superuser counts as one).
    "annotation:project-create":      {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:project-settings":    {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:project-archive":     {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:project-unarchive":   {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:project-archive-file": {"get": (302, 404, 404, 200, 200), "post": (302, 405, 405, 405, 405)},
    "annotation:project-members":     {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:member-remove":       {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:member-pause":        {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:member-resume":       {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:member-invite":       {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    # The invite (set password) page is public: its token is the credential (a bad one: 200 "invalid").
    "annotation:invite":              {"get": (200, 200, 200, 200, 200), "post": (200, 200, 200, 200, 200)},
    "annotation:items":               {"get": (302, 404, 404, 200, 200), "post": (302, 405, 405, 405, 405)},
    "annotation:item":                {"get": (302, 404, 404, 200, 200), "post": (302, 405, 405, 405, 405)},
    "annotation:adjudicate":          {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "annotation:adjudicate-save":     {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "annotation:label-flag":          {"get": (302, 405, 405, 405, 405), "post": (302, 302, 404, 404, 404)},
    "monitoring:review-home":         {"get": (302, 403, 200, 403, 200), "post": (302, 403, 200, 403, 200)},
    "monitoring:every-role-home":     {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "monitoring:runs":                {"get": (302, 404, 200, 200, 200), "post": (302, 404, 200, 200, 200)},
    "monitoring:run-detail":          {"get": (302, 404, 200, 200, 200), "post": (302, 404, 200, 200, 200)},
    "monitoring:run-metrics":         {"get": (302, 404, 200, 200, 200), "post": (302, 404, 200, 200, 200)},
    "monitoring:runs-compare":        {"get": (302, 404, 200, 200, 200), "post": (302, 404, 200, 200, 200)},
    "monitoring:eval-rounds":         {"get": (302, 403, 200, 200, 200), "post": (302, 403, 200, 200, 200)},
    "monitoring:eval-available":      {"get": (302, 403, 400, 400, 400), "post": (302, 403, 400, 400, 400)},
    "monitoring:eval-round":          {"get": (302, 403, 200, 200, 200), "post": (302, 403, 200, 200, 200)},
    "monitoring:eval-progress":       {"get": (302, 403, 200, 200, 200), "post": (302, 403, 200, 200, 200)},
    "monitoring:eval-rate":           {"get": (302, 403, 200, 403, 200), "post": (302, 403, 404, 403, 404)},
    # POST only (a GET goes back to the rating screen); another reviewer's assignment is a 404.
    "monitoring:eval-skip":           {"get": (302, 403, 302, 403, 302), "post": (302, 403, 404, 403, 404)},
    "monitoring:run-decide":          {"get": (302, 405, 405, 405, 405), "post": (302, 403, 302, 403, 302)},
    "monitoring:judges":              {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 400, 400)},
    "monitoring:judge-report":        {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 200, 200)},
    "monitoring:judge-relaunch":      {"get": (302, 405, 405, 405, 405), "post": (302, 404, 404, 302, 302)},
    "monitoring:judge-import":        {"get": (302, 404, 404, 200, 200), "post": (302, 404, 404, 400, 400)},
    "admin:index":                    {"get": (302, 302, 302, 200, 200), "post": (302, 302, 302, 200, 200)},
    "admin:login":                    {"get": (200, 200, 200, 302, 302), "post": (200, 200, 200, 200, 200)},
    "admin:logout":                   {"get": (302, 302, 302, 405, 405), "post": (302, 302, 302, 302, 302)},
    "admin:password_change":          {"get": (302, 302, 302, 200, 200), "post": (302, 302, 302, 200, 200)},
    "admin:password_change_done":     {"get": (302, 302, 302, 200, 200), "post": (302, 302, 302, 405, 405)},
    "admin:autocomplete":             {"get": (302, 302, 302, 403, 403), "post": (302, 302, 302, 405, 405)},
    "admin:jsi18n":                   {"get": (302, 302, 302, 200, 200), "post": (302, 302, 302, 405, 405)},
    "admin:view_on_site":             {"get": (302, 302, 302, 404, 404), "post": (302, 302, 302, 404, 404)},
    "admin:app_list":                 {"get": (302, 302, 302, 200, 200), "post": (302, 302, 302, 200, 200)},
    "admin:<admin/(?P<url>.*)$>":     {"get": (302, 302, 302, 404, 404), "post": (302, 302, 302, 404, 404)},
    "api-import-create":              {"get": (401, 403, 403, 405, 405), "post": (401, 403, 403, 400, 400)},
    "api-import-detail":              {"get": (401, 403, 403, 200, 200), "post": (401, 403, 403, 405, 405)},
    "api-import-cancel":              {"get": (401, 403, 403, 405, 405), "post": (401, 403, 403, 409, 409)},
    "api-export-create":              {"get": (401, 403, 403, 405, 405), "post": (401, 403, 403, 201, 201)},
    "api-export-job-detail":          {"get": (401, 403, 403, 200, 200), "post": (401, 403, 403, 405, 405)},
    "api-export-job-cancel":          {"get": (401, 403, 403, 405, 405), "post": (401, 403, 403, 409, 409)},
    "api-judge-import":               {"get": (401, 403, 403, 405, 405), "post": (401, 403, 403, 400, 400)},
    "api-schema":                     {"get": (200, 200, 200, 200, 200), "post": (405, 405, 405, 405, 405)},
}  # fmt: skip

# Admin model pages (admin:<app>_<model>_<action>, and the old-style admin/<app>/<model>/<id>/ that
# redirects to the change page): users who are not staff go to the admin login (302); the ML engineer
# holds every permission of the Concord apps and only "view user" of auth (groups, and changing users:
# 403); the superuser all.
ADMIN_MODEL_APPS = {"auth": 403, "annotation": 200, "training": 200, "common": 403}
ADMIN_MODEL_EXCEPTIONS = {
    # ML engineers may view user accounts (the admin's raw-id widgets link to them), not change them.
    ("admin:auth_user_changelist", "get"): (302, 302, 302, 200, 200),
    ("admin:auth_user_changelist", "post"): (302, 302, 302, 200, 200),
    ("admin:auth_user_history", "get"): (302, 302, 302, 200, 200),
    ("admin:auth_user_history", "post"): (302, 302, 302, 200, 200),
    ("admin:auth_user_change", "get"): (302, 302, 302, 200, 200),
}
# The annotation admin writes through the services or not at all (annotation/admin.py): what
# imports, annotators and jobs write has no add or delete page and its change page is read only (a
# POST is refused); a project cannot be deleted (archive it), a cluster neither added nor deleted.
ANNOTATION_READ_ONLY = (
    "prompt", "response", "comparison", "judgement", "assignment", "importjob", "datasetexport",
    "clusteringrun", "exportjob",
)  # fmt: skip
REFUSED = (302, 302, 302, 403, 403)
for _model in ANNOTATION_READ_ONLY:
    for _action, _methods in (
        ("add", ("get", "post")),
        ("delete", ("get", "post")),
        ("change", ("post",)),
    ):
        for _method in _methods:
            ADMIN_MODEL_EXCEPTIONS[(f"admin:annotation_{_model}_{_action}", _method)] = REFUSED
for _name in ("project_delete", "promptcluster_add", "promptcluster_delete"):
    for _method in ("get", "post"):
        ADMIN_MODEL_EXCEPTIONS[(f"admin:annotation_{_name}", _method)] = REFUSED
# Login lockouts (common): the superuser sees and may delete them; nobody adds or changes one (the
# throttle writes them); ML engineers hold no permission of the common app.
for _action, _method in (("add", "get"), ("add", "post"), ("change", "post")):
    ADMIN_MODEL_EXCEPTIONS[(f"admin:common_loginlockout_{_action}", _method)] = REFUSED
# Single sign-on identities (common): the superuser sees and may delete them (unlinking an account);
# nobody adds one (sign-ins do) and every field is read only (a POST saves nothing and redirects).
for _method in ("get", "post"):
    ADMIN_MODEL_EXCEPTIONS[("admin:common_ssoidentity_add", _method)] = REFUSED
ADMIN_MODEL_EXCEPTIONS[("admin:common_ssoidentity_change", "post")] = (302, 302, 302, 403, 302)
# An empty POST to a cluster's page is a valid rename to no name (cluster_rename clears it): saved.
ADMIN_MODEL_EXCEPTIONS[("admin:annotation_promptcluster_change", "post")] = (
    302,
    302,
    302,
    302,
    302,
)
# The training admin writes through the services too (training/admin.py): the world's snapshot is
# the data of its run, so it cannot be deleted (snapshot_delete refuses; the admin offers no delete),
# and an empty POST to its page is a valid rename to no name (snapshot_rename): saved.
for _method in ("get", "post"):
    ADMIN_MODEL_EXCEPTIONS[("admin:training_datasetsnapshot_delete", _method)] = REFUSED
ADMIN_MODEL_EXCEPTIONS[("admin:training_datasetsnapshot_change", "post")] = (
    302,
    302,
    302,
    302,
    302,
)
# Known failures (found by this test); strict, so the entry must go once the bug is fixed.
KNOWN_BUGS: dict[str, str] = {}


def expected_statuses(name: str, route: str, method: str) -> tuple[int, ...] | None:
    """The row for ``name``, from MATRIX or the admin model rule; None when the URL has no entry."""
    if name in MATRIX:
        return MATRIX[name].get(method)
    if (name, method) in ADMIN_MODEL_EXCEPTIONS:
        return ADMIN_MODEL_EXCEPTIONS[(name, method)]
    if name.startswith("admin:") and route.startswith("admin/"):
        app = route.split("/")[1]
        if app in ADMIN_MODEL_APPS:
            if name.startswith("admin:<"):  # admin/<app>/<model>/<id>/: redirect to the change page
                return (302, 302, 302, 302, 302)
            return (302, 302, 302, ADMIN_MODEL_APPS[app], 200)
    return None


ALL_URLS = list(url_patterns())


def test_every_url_pattern_has_an_entry():
    """A new URL (or a URL of a newly registered admin model) must be added to the table."""
    missing = [
        f"{name} ({route})"
        for name, route in ALL_URLS
        if any(expected_statuses(name, route, method) is None for method in ("get", "post"))
    ]
    assert not missing, "add these URLs to MATRIX in this file:\n" + "\n".join(missing)
    stale = set(MATRIX) - {name for name, _ in ALL_URLS}
    assert not stale, f"MATRIX names URLs that no longer exist: {sorted(stale)}"


def _matrix_params() -> list:
    return [
        pytest.param(
            name,
            route,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name])]
            if name in KNOWN_BUGS
            else [],
        )
        for name, route in ALL_URLS
        if expected_statuses(name, route, "get") is not None  # else the completeness test fails
    ]


@pytest.fixture(scope="module")
def shared_world(django_db_setup, django_db_blocker, tmp_path_factory):
    """One world for the module, built once inside a transaction rolled back at the end."""
    exports = tmp_path_factory.mktemp("exports")
    with django_db_blocker.unblock(), override_settings(EXPORT_DIR=exports), transaction.atomic():
        yield world_build()
        transaction.set_rollback(True)


@pytest.fixture
def world(shared_world, db) -> World:
    """The shared world; whatever a test writes is rolled back after it (``db``)."""
    return shared_world


@pytest.mark.parametrize(("name", "route"), _matrix_params())
def test_status_per_role_and_method(name, route, world):
    """Each role gets the status the table says, for GET and POST (empty POST body)."""
    w = world
    path = path_for(name, route, w)
    got, want = {}, {}
    for method in ("get", "post"):
        expected = expected_statuses(name, route, method)
        if expected is None:
            continue
        want[method] = expected
        got[method] = tuple(
            getattr(client_for(role, w), method)(path).status_code for role in ROLES
        )
    assert got == want, f"{path}: roles {ROLES}"


def test_annotator_gets_404_for_a_project_they_are_not_in(world):
    """Every labelling URL of another project answers 404, whatever the assignment id."""
    annie = client_for("annotator", world)
    other, a_id = world.other.slug, world.other_assignment.pk
    assert annie.get(f"/annotation/p/{other}/label/").status_code == 404
    assert annie.get(f"/annotation/p/{other}/label/last/").status_code == 404
    assert annie.post(f"/annotation/p/{other}/label/{a_id}/", {"pick": "left"}).status_code == 404
    assert annie.post(f"/annotation/p/{other}/label/{a_id}/skip/").status_code == 404
    assert annie.post(f"/annotation/p/{other}/label/ahead/").status_code == 404
    assert annie.get(f"/annotation/p/{other}/label/history/").status_code == 404
    assert annie.get("/annotation/p/no-such-project/label/").status_code == 404


def test_annotator_cannot_judge_or_skip_another_annotators_assignment(world):
    """Posting to bob's assignment changes nothing: no judgement by annie, bob's lease untouched."""
    from annotation.models import Assignment, Judgement

    annie = client_for("annotator", world)
    bob_id = world.bob_assignment.pk
    annie.post(f"/annotation/p/own/label/{bob_id}/", {"pick": "left", "strength": "1"})
    annie.post(f"/annotation/p/own/label/{bob_id}/skip/")
    assert not Judgement.objects.filter(annotator=world.users["annotator"]).exists()
    bob_assignment = Assignment.objects.get(pk=bob_id)
    assert (bob_assignment.status, bob_assignment.annotator_id) == ("active", world.users["bob"].pk)


def test_annotator_edit_last_never_shows_another_annotators_judgement(world):
    """Z (edit last) with no judgement of one's own redirects; bob's rationale never appears."""
    annie = client_for("annotator", world)
    response = annie.get("/annotation/p/own/label/last/", follow=True)
    assert BOB_SECRET not in response.content.decode()


@pytest.mark.parametrize("role", ["annotator", "reviewer"])
def test_no_page_or_api_shows_another_annotators_rationale(world, role):
    """Annotators and reviewers never see bob's rationale: every GET-able URL is read as that role.

    (The project lead does see it on the agreement pages and in exports: that is their job.)
    """
    client = client_for(role, world)
    leaks = []
    for name, route in ALL_URLS:
        if name in KNOWN_BUGS or expected_statuses(name, route, "get") is None:
            continue
        path = path_for(name, route, world)
        response = client.get(path, follow=True)
        raw = (
            b"".join(response.streaming_content) if response.streaming else response.content
        )  # a redirect can end on a static file (the favicon), which WhiteNoise streams
        body = raw.decode(errors="replace")
        if BOB_SECRET in body:
            leaks.append(path)
    assert leaks == []


LEAD_PAGES = ("settings/", "members/")
LEAD_POSTS = (
    "settings/archive/",
    "settings/unarchive/",
    "members/",
    "members/bob/remove/",
    "members/bob/pause/",
    "members/bob/resume/",
    "members/bob/invite/",
)


@pytest.mark.parametrize("role", ["annotator", "reviewer"])
@pytest.mark.parametrize("project", ["own", "other"])
def test_annotators_and_reviewers_get_404_on_project_lead_pages_and_change_nothing(
    world, role, project
):
    """The settings and people pages of any project, their own included, answer 404 to annotators
    and reviewers; their POSTs (archive, add, remove, pause, invite) change nothing."""
    from annotation.models import Project, ProjectEvent, ProjectMembership

    client = client_for(role, world)
    members_before = set(
        ProjectMembership.objects.values_list("project_id", "user_id", "paused_at")
    )
    statuses = [client.get(f"/annotation/p/{project}/{page}").status_code for page in LEAD_PAGES]
    statuses += [
        client.post(f"/annotation/p/{project}/{page}", {"identifier": "annie"}).status_code
        for page in LEAD_POSTS
    ]
    statuses.append(
        client.post("/annotation/projects/new/", {"name": "x", "slug": "x"}).status_code
    )
    assert statuses == [404] * (len(LEAD_PAGES) + len(LEAD_POSTS) + 1)
    assert set(ProjectMembership.objects.values_list("project_id", "user_id", "paused_at")) == (
        members_before
    )
    assert not ProjectEvent.objects.exists()
    assert not Project.objects.filter(slug="x").exists()
    assert Project.objects.get(slug=project).archived_at is None


def test_ml_engineer_opens_the_user_list_of_a_raw_id_widget_but_cannot_change_a_user(world):
    """The admin's raw-id lookup (a popup of the user list) opens for ML engineers: 200, not 403;
    changing, adding or deleting a user stays the superuser's (403)."""
    emily = client_for("ml_engineer", world)
    bob = world.users["bob"]
    assert emily.get("/admin/auth/user/?_to_field=id&_popup=1").status_code == 200
    assert emily.post(f"/admin/auth/user/{bob.pk}/change/", {"username": "x"}).status_code == 403
    assert emily.get("/admin/auth/user/add/").status_code == 403
    assert emily.post(f"/admin/auth/user/{bob.pk}/delete/", {"post": "yes"}).status_code == 403
    bob.refresh_from_db()
    assert bob.username == "bob"


def test_single_sign_on_urls_when_configured(world, settings):
    """Switched on (a provider that is not running): every role, signed in or not, is sent on by
    the first step (302 to the provider) and by a callback without a code (302 to the login page);
    a callback with a state the session never issued is refused (400); POST is 405."""
    from tests.helpers.oidc_provider import RunningProvider

    RunningProvider(url="http://127.0.0.1:9").configure(settings)
    for role in ROLES:
        client = client_for(role, world)
        start = client.get("/accounts/sso/login/")
        assert start.status_code == 302, role
        assert start["Location"].startswith("http://127.0.0.1:9/openid/authorize?"), role
        assert client.get("/accounts/sso/callback/").status_code == 302, role
        forged = client.get("/accounts/sso/callback/", {"code": "c", "state": "not-issued"})
        assert forged.status_code == 400, role
        assert client.post("/accounts/sso/login/").status_code == 405, role
        assert client.post("/accounts/sso/callback/").status_code == 405, role

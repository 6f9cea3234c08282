"""The project lead's pages in a real browser: what a lead reads on the upload form, the item
browser, the settings page, and what an invited person reads on the invite and login pages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from annotation.services import projects as project_services
from annotation.services.adjudication import guidelines_update
from annotation.services.importing import comparisons_import, project_get_or_create
from common.roles import ADJUDICATOR, ANNOTATOR, ML_ENGINEER, REVIEWER, role_assign
from config.celery import app as celery_app
from tests.factories import UserFactory
from tests.helpers.browser import log_in

# PandaLM's test set in small: the second row's response1 is JSON ``true`` (as in the real file).
PANDA = [
    {"idx": 0, "cmp_key": "a_b", "instruction": "Do it.", "input": "", "response1": "x",
     "response2": "z", "annotator1": 1, "annotator2": 1, "annotator3": 0},
    {"idx": 1, "cmp_key": "a_b", "instruction": "Again.", "input": "", "response1": True,
     "response2": "y", "annotator1": 2, "annotator2": 2, "annotator3": 2},
]  # fmt: skip
NEW_PASSWORD = "a fresh long passphrase 7"
CHECKBOX = "Import responses that are JSON numbers or booleans as their text"


@pytest.fixture
def eager_tasks(browser, live_server, settings, tmp_path) -> Iterator[None]:
    """Queued tasks run in the request that queues them (the live server's thread), so an upload's
    import is over when the page comes back. Requests ``browser`` first (no Chromium: skip)."""
    settings.UPLOAD_DIR = tmp_path / "uploads"
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def lead(browser, live_server, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return UserFactory(username="lena", role=ML_ENGINEER)


def _upload(page: Page, path, *, as_text: bool) -> None:
    page.goto("/annotation/p/panda/manage/")
    form = page.get_by_test_id("import-form")
    form.locator("input[type=file]").set_input_files(str(path))
    form.locator("select[name=format]").select_option("pandalm")
    if as_text:
        form.get_by_label(CHECKBOX).check()
    form.get_by_role("button", name="Upload and import").click()
    expect(page).to_have_url(re.compile(r"/annotation/p/panda/manage/$"))


def test_upload_error_names_the_checkbox_and_the_summary_counts_values_read_as_text(
    eager_tasks, lead, page: Page, tmp_path
) -> None:
    """A PandaLM file whose response1 is JSON ``true``, uploaded without the checkbox, fails on
    item 2 with an error that names the checkbox beside the upload (a person on the page has no
    command-line flag to pass); uploaded again with it ticked, it imports both rows and the summary
    says that 1 value (the ``true``) was imported as text."""
    project_get_or_create(slug="panda")
    path = tmp_path / "testset.json"
    path.write_text(json.dumps(PANDA), encoding="utf-8")
    log_in(page, lead)

    _upload(page, path, as_text=False)
    result = page.get_by_test_id("import-jobs").locator("tbody tr").first.locator(".job-result")
    expect(result).to_contain_text(f'(the checkbox "{CHECKBOX}" imports it as its JSON text)')
    expect(result).not_to_contain_text("--scalars-as-text")

    _upload(page, path, as_text=True)
    result = page.get_by_test_id("import-jobs").locator("tbody tr").first.locator(".job-result")
    expect(result).to_contain_text("2 comparisons created")
    expect(result).to_contain_text("; 1 JSON number or boolean imported as text")


def test_an_invited_person_reads_their_username_and_logs_in_with_their_email(
    lead, page: Page
) -> None:
    """The lead adds ``nora.lee@example.org``: her account is named ``nora.lee`` (the email's local
    part), which nobody told her. The invite page says "Your username is nora.lee"; after she sets a
    password, logging in with her email typed in other case (``Nora.Lee@EXAMPLE.org``) lands her on
    her Label page, showing ``nora.lee`` as the logged-in user."""
    project, _ = project_get_or_create(slug="inv")
    added = project_services.member_add(
        project=project, actor=lead, identifier="nora.lee@example.org"
    )
    page.goto(added.invite)
    expect(page.get_by_test_id("invite-username")).to_contain_text(
        "Your username is nora.lee (you can also log in with your email, nora.lee@example.org)"
    )
    page.fill("#id_new_password1", NEW_PASSWORD)
    page.fill("#id_new_password2", NEW_PASSWORD)
    page.get_by_role("button", name="Set password").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
    expect(page.locator(".messages")).to_contain_text("Log in with your username, nora.lee, and it")

    page.fill("#id_username", "Nora.Lee@EXAMPLE.org")
    page.fill("#id_password", NEW_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/annotation/$"))
    expect(page.get_by_test_id("username")).to_have_text("nora.lee")


def test_item_browser_says_disagreement_and_reads_an_old_split_link(lead, page: Page) -> None:
    """Two annotators who chose differently: the item browser's Agreement filter offers
    "disagreement" (no "split": that word is the adjudication queue's "no majority"), and a link
    saved with the old ``?agreement=split`` opens with "disagreement" chosen and lists that one
    comparison, whose Agreement column reads "disagreement"."""
    project, _ = project_get_or_create(slug="words")
    votes = [{"annotator": "u1", "choice": "a"}, {"annotator": "u2", "choice": "b"}]
    row = {
        "prompt": "Best pasta?",
        "response_a": "Boil it",
        "response_b": "Bake it",
        "judgements": votes,
    }
    same = {**row, "prompt": "Best rice?", "judgements": [{"annotator": "u1", "choice": "a"}]}
    comparisons_import(project=project, lines=[json.dumps(row), json.dumps(same)])
    log_in(page, lead)

    page.goto("/annotation/p/words/items/?agreement=split")
    choice = page.get_by_test_id("item-filters").locator("select[name=agreement]")
    expect(choice.locator("option")).to_have_text(
        ["any", "unjudged", "single", "unanimous", "disagreement"]
    )
    expect(choice).to_have_value("disagreement")
    expect(page.get_by_test_id("item-counts")).to_contain_text("1 matching of 2 comparisons")
    rows = page.get_by_test_id("items-table").locator("tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td").nth(5)).to_have_text("disagreement")


def test_settings_page_lists_guidelines_versions_and_diffs_two_chosen(lead, page: Page) -> None:
    """Guidelines saved three times are versions 1, 2 and 3, listed on the settings page (3 in
    force). The page opens on the change from 2 to 3 (line "Ties are allowed." added); choosing 1
    and 3 shows both later lines added and "Be kind." kept; a hand-typed version 9 is an error
    naming the versions there are, with no diff."""
    project, _ = project_get_or_create(slug="rules")
    lines = ["Be kind.", "Prefer short answers.", "Ties are allowed."]
    for n in (1, 2, 3):
        guidelines_update(project=project, text="\n".join(lines[:n]), user=lead)
    log_in(page, lead)

    page.goto("/annotation/p/rules/settings/")
    versions = page.get_by_test_id("guidelines-versions")
    expect(versions.locator("tbody tr")).to_have_count(3)
    expect(versions.locator("tbody tr").nth(2)).to_contain_text("3 (in force)")
    diff = page.get_by_test_id("guidelines-diff")
    expect(diff.locator("span")).to_have_text(
        ["  Be kind.", "  Prefer short answers.", "+ Ties are allowed."]
    )

    compare = page.get_by_test_id("guidelines-compare")
    compare.locator("select[name=old]").select_option("1")
    compare.locator("select[name=new]").select_option("3")
    compare.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(re.compile(r"\?old=1&new=3$"))
    expect(diff.locator("span.diff-added")).to_have_text(
        ["+ Prefer short answers.", "+ Ties are allowed."]
    )
    expect(diff.locator("span.diff-same")).to_have_text(["  Be kind."])

    page.goto("/annotation/p/rules/settings/?old=9&new=3")
    expect(page.get_by_test_id("guidelines-diff-error")).to_have_text(
        "No guidelines version '9' to compare (versions: 1, 2, 3)."
    )
    expect(page.get_by_test_id("guidelines-diff")).to_have_count(0)


def test_lead_pages_show_words_not_raw_values(eager_tasks, lead, page: Page, tmp_path) -> None:
    """One imported row with one judgement, in a project of overlap 2. The upload's summary counts
    in the right number ("1 row: 1 comparison created, ... 1 annotator account created"); the item
    browser's status reads "in progress" (filter and row), not the URL key squeezed to
    "inprogress"; the item page says the side shown on the left was "not recorded" (an imported
    judgement has none), not "UNKNOWN"."""
    project_get_or_create(slug="words", overlap=2)
    row = {"prompt": "Best pasta?", "response_a": "Boil it", "response_b": "Bake it",
           "judgements": [{"annotator": "u1", "choice": "a"}]}  # fmt: skip
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    log_in(page, lead)

    page.goto("/annotation/p/words/manage/")
    form = page.get_by_test_id("import-form")
    form.locator("input[type=file]").set_input_files(str(path))
    form.get_by_role("button", name="Upload and import").click()
    expect(page.get_by_test_id("import-jobs").locator(".job-result").first).to_have_text(
        "concord (jsonl): 1 row: 1 comparison created, 0 already present; 1 judgement created, "
        "0 already present; 1 annotator account created; 0 empty responses"
    )

    page.goto("/annotation/p/words/items/")
    status = page.get_by_test_id("item-filters").locator("select[name=status] option")
    expect(status).to_have_text(["any", "open", "in progress", "complete", "adjudicated"])
    row_cells = page.get_by_test_id("items-table").locator("tbody tr").first.locator("td")
    expect(row_cells.nth(3)).to_have_text("in progress")
    row_cells.first.locator("a").click()
    judgement = page.get_by_test_id("item-judgements").locator("tbody tr").first.locator("td")
    expect(judgement.nth(3)).to_have_text("not recorded")


SUBNAV = [
    "Manage", "Items", "Prompt clusters", "Agreement dashboard", "Adjudication", "Judges",
    "People", "Settings and audit log",
]  # fmt: skip


def test_every_lead_page_has_the_same_project_navigation(lead, page: Page) -> None:
    """The lead's pages of a project (Manage, Items, Prompt clusters, Agreement dashboard, People,
    Settings) each show the same project navigation, in the same order, with the page itself marked
    as the current one; before, Manage had seven links, People and Settings four, Items only a link
    back."""
    project_get_or_create(slug="nav")
    log_in(page, lead)
    pages = {
        "manage": "Manage",
        "items": "Items",
        "clusters": "Prompt clusters",
        "agreement": "Agreement dashboard",
        "members": "People",
        "settings": "Settings and audit log",
    }
    for path, current in pages.items():
        page.goto(f"/annotation/p/nav/{path}/")
        nav = page.get_by_test_id("project-subnav")
        expect(nav.get_by_role("link")).to_have_text(SUBNAV)
        expect(nav.locator("a[aria-current=page]")).to_have_text([current])


def test_remove_and_archive_buttons_look_destructive_not_primary(lead, page: Page) -> None:
    """Remove (a member) and Archive project are drawn in red outline on white, unlike the filled
    blue of a primary action such as Add or Save settings, so neither is pressed by habit."""
    project, _ = project_get_or_create(slug="danger")
    UserFactory(username="ann", role="Annotator")
    project_services.member_add(project=project, actor=lead, identifier="ann")
    log_in(page, lead)

    red, white = "rgb(179, 38, 30)", "rgb(255, 255, 255)"
    page.goto("/annotation/p/danger/members/")
    remove = page.locator('tr[data-member="ann"]').get_by_role("button", name="Remove")
    expect(remove).to_have_css("color", red)
    expect(remove).to_have_css("background-color", white)
    expect(page.get_by_role("button", name="Add")).not_to_have_css("background-color", white)

    page.goto("/annotation/p/danger/settings/")
    archive = page.get_by_role("button", name="Archive project")
    expect(archive).to_have_css("color", red)
    expect(archive).to_have_css("background-color", white)
    save = page.get_by_role("button", name="Save settings")
    expect(save).not_to_have_css("background-color", white)


def test_overview_hints_lead_to_people_and_adjudication_not_the_admin(
    browser, live_server, settings, page: Page
) -> None:
    """A superuser (every role) who is a member of no project: the overview's Label card says to
    add themself on a project's People page and links that page (not the Django admin); an
    Adjudicate card links the project's adjudication queue. The lead page of a project without
    annotators points to its People page too."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    project_get_or_create(slug="hints", name="Hints")
    log_in(page, root)

    expect(page).to_have_url(re.compile(r"/monitoring/overview/$"))
    hint = page.get_by_test_id("hub-label-hint")
    expect(hint).to_contain_text("on a project's People page (Hints)")
    expect(hint.get_by_role("link")).to_have_attribute("href", "/annotation/p/hints/members/")
    expect(page.get_by_test_id("hub-label").locator("a[href^='/admin/']")).to_have_count(0)
    adjudicate = page.get_by_test_id("hub-adjudication").get_by_role("link", name="Hints")
    expect(adjudicate).to_have_attribute("href", "/annotation/p/hints/adjudicate/")

    page.goto("/annotation/p/hints/manage/")
    empty = page.get_by_test_id("no-annotators")
    expect(empty).to_have_text("No annotators yet: add them on the People page.")
    expect(empty.get_by_role("link")).to_have_attribute("href", "/annotation/p/hints/members/")


def test_invite_link_has_a_copy_button(lead, page: Page) -> None:
    """Adding ``eve@example.org`` on the People page shows her one-time invite link in a field
    with a Copy button (a script file: the Content-Security-Policy forbids inline ones); pressing
    it puts exactly that link on the clipboard and says "Copied."; a reload no longer shows the
    link (it is shown once). No CSP violation or page error on the way."""
    project_get_or_create(slug="copy")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    log_in(page, lead)

    page.goto("/annotation/p/copy/members/")
    page.fill("#id_identifier", "eve@example.org")
    page.get_by_role("button", name="Add").click()
    link = page.get_by_test_id("invite-link")
    expect(link).to_have_value(re.compile(r"^http://[^/]+/annotation/invite/[^/]+/[^/]+/$"))
    page.get_by_test_id("copy-invite").click()
    expect(page.get_by_test_id("copy-status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == link.input_value()

    page.reload()
    expect(page.get_by_test_id("invite-link")).to_have_count(0)
    assert problems == []


def test_narrow_screens_never_scroll_sideways(lead, page: Page) -> None:
    """At 800 pixels an account holding every role (four role badges in the top bar) and a
    project's wide tables (members, items, an item's judgements) stay within the window: the top
    bar wraps and each table scrolls inside its card."""
    for role in (ANNOTATOR, REVIEWER, ADJUDICATOR):
        role_assign(user=lead, role=role)
    project = project_get_or_create(slug="narrow", overlap=2)[0]
    row = {"prompt": "Best pasta?", "response_a": "Boil it", "response_b": "Bake it",
           "judgements": [{"annotator": "someone-with-a-long-name", "choice": "a"}]}  # fmt: skip
    comparisons_import(project=project, lines=[json.dumps(row)])
    comparison = project.comparisons.get()
    page.set_viewport_size({"width": 800, "height": 700})
    log_in(page, lead)
    for path in ("/", "/annotation/p/narrow/members/", "/annotation/p/narrow/items/",
                 f"/annotation/p/narrow/items/{comparison.pk}/"):  # fmt: skip
        page.goto(path)
        wider = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wider <= 0, (path, wider)

"""The main pages in the real browser: no Content-Security-Policy violation, and stored XSS is inert.

Two worlds: plain words everywhere (any CSP violation then comes from the page itself: an inline
script or style attribute), and the XSS corpus (tests/security/xss_payloads.py) in prompts, responses,
rationales, project names and guidelines, cluster names, import errors and run names. On every page:
no console CSP report and no page error, no dialog, ``window.__xss`` unset, no request to another host.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.test import Client

from tests.helpers.security_world import world_build
from tests.helpers.xss_payloads import XSS_PAYLOADS


def _xss_text(field_name: str, index: int) -> str:
    if field_name == "guidelines":
        return "\n\n".join(XSS_PAYLOADS)
    if field_name == "project name":
        return XSS_PAYLOADS[index][:200]
    if field_name in ("cluster name",):
        return XSS_PAYLOADS[(index + 7) % len(XSS_PAYLOADS)][:100]
    return XSS_PAYLOADS[index % len(XSS_PAYLOADS)]


def _pages(w) -> list[tuple[str, str]]:
    """(role, path) of the pages to check; the login page is opened anonymously. The world's run
    gets metrics (charts drawn) and a second run to compare it with."""
    from training.models import MetricPoint, TrainingRun

    own = w.own.slug
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=w.run, step=s, name="loss", value=1.0 / s) for s in (1, 2, 3)]
        + [MetricPoint(run=w.run, step=3, name="rewards/accuracy", value=0.5)]
    )
    second = TrainingRun.objects.create(
        name=w.run.name, kind="dpo", base_model=w.run.base_model, snapshot=w.run.snapshot,
        config={"beta": 0.2},
    )  # fmt: skip
    return [
        ("anonymous", "/accounts/login/"),
        ("annotator", "/annotation/"),
        ("annotator", f"/annotation/p/{own}/label/"),
        ("annotator", "/accounts/me/"),  # annie's API token, its name from the corpus
        ("reviewer", "/monitoring/"),
        ("ml_engineer", "/annotation/projects/"),
        ("ml_engineer", f"/annotation/p/{own}/manage/"),
        ("ml_engineer", f"/annotation/p/{own}/agreement/"),
        ("ml_engineer", f"/annotation/p/{own}/agreement/annotators/bob/"),
        ("ml_engineer", f"/annotation/p/{own}/clusters/"),
        ("ml_engineer", f"/annotation/p/{own}/items/"),
        ("ml_engineer", f"/annotation/p/{own}/items/{w.annie_assignment.comparison_id}/"),
        ("ml_engineer", f"/annotation/p/{own}/adjudicate/"),
        ("ml_engineer", f"/annotation/p/{own}/members/"),
        ("ml_engineer", f"/annotation/p/{own}/settings/"),
        ("ml_engineer", f"/annotation/p/{own}/export-jobs/{w.export_job.pk}/"),
        ("ml_engineer", "/annotation/projects/new/"),
        ("ml_engineer", f"/monitoring/projects/{own}/judges/"),
        ("ml_engineer", f"/monitoring/judges/{w.judge.pk}/"),
        ("ml_engineer", "/monitoring/runs/"),
        ("ml_engineer", f"/monitoring/runs/{w.run.pk}/"),
        ("ml_engineer", f"/monitoring/runs/compare/?runs={w.run.pk}&runs={second.pk}"),
        ("superuser", "/admin/"),
        ("superuser", "/admin/training/trainingrun/add/"),
        ("superuser", "/admin/annotation/project/"),
        ("superuser", "/admin/annotation/judgement/"),
        ("superuser", "/admin/annotation/promptcluster/"),
        ("superuser", "/admin/annotation/importjob/"),
        ("superuser", "/admin/common/loginlockout/"),
    ]


def _console(problems: list[str], tag: str, msg) -> None:
    """Console errors are problems, except a failed load: the response listener reports those."""
    if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
        problems.append(f"{tag}: console error: {msg.text}")
    elif "Content Security Policy" in msg.text:
        problems.append(f"{tag}: console {msg.type}: {msg.text}")


@pytest.mark.parametrize("content", ["plain", "xss"])
def test_main_pages_have_no_csp_violation_and_stored_xss_is_inert(
    browser, live_server, settings, tmp_path, content
):
    """Every main page loads for its role with no CSP report, no script run, no foreign request."""
    settings.EXPORT_DIR = tmp_path
    if content == "xss":
        w = world_build(text=_xss_text, rationale=" ".join(XSS_PAYLOADS), n_pairs=18)
    else:
        w = world_build()
    host = urlsplit(live_server.url).netloc
    problems: list[str] = []
    for role, path in _pages(w):
        context = browser.new_context(base_url=live_server.url)
        context.set_default_timeout(10_000)
        if role != "anonymous":
            client = Client()
            client.force_login(w.users[role])
            session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
            context.add_cookies(
                [
                    {
                        "name": django_settings.SESSION_COOKIE_NAME,
                        "value": session,
                        "url": live_server.url,
                    }
                ]
            )
        page = context.new_page()
        tag = f"{role} {path}"
        page.on("console", lambda msg, tag=tag: _console(problems, tag, msg))
        page.on(
            "response",
            lambda resp, tag=tag: (
                problems.append(f"{tag}: {resp.status} for {resp.url}")
                if resp.status >= 400 and not resp.url.endswith("/favicon.ico")
                else None
            ),
        )
        page.on("pageerror", lambda exc, tag=tag: problems.append(f"{tag}: page error {exc}"))
        page.on(
            "dialog", lambda dialog, tag=tag: (problems.append(f"{tag}: dialog"), dialog.dismiss())
        )
        page.on(
            "request",
            lambda req, tag=tag: (
                problems.append(f"{tag}: request to {req.url}")
                if urlsplit(req.url).scheme in ("http", "https")
                and urlsplit(req.url).netloc != host
                else None
            ),
        )
        response = page.goto(path, wait_until="load")
        assert response is not None and response.status == 200, (
            f"{tag}: {response and response.status}"
        )
        page.wait_for_timeout(150)  # deferred scripts and their fetches
        if content == "xss" and path.endswith("/label/"):
            # The payloads are on the page, shown as text (so the test would see them run).
            assert "window.__xss=1" in page.inner_text("body")
        if page.evaluate("typeof window.__xss") != "undefined":
            problems.append(f"{tag}: window.__xss was set")
        context.close()
    assert problems == []

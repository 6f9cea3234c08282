"""The model-judge form in headless Chromium shows only the chosen kind's fields: choosing a kind
reloads the page with that kind's fields, as the training-run form does (static/common/
kind_reload.js). An endpoint judge is then created from the form. Every page is checked for
Content-Security-Policy violations and page errors."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from annotation.services.importing import project_get_or_create
from monitoring.models import Judge
from tests.helpers.browser import log_in

# Each kind's fields (the form's ids) and every field of the form but kind and name.
FIELDS = {
    "reward_model": {"reward_run", "tie_band"},
    "local_llm": {"model_name", "template", "max_new_tokens"},
    "openai": {"endpoint_url", "served_model", "api_key_env", "max_concurrency", "timeout_s",
               "template", "max_new_tokens"},
}  # fmt: skip
EVERY = set().union(*FIELDS.values())


def _expect_only(page: Page, kind: str) -> None:
    form = page.get_by_test_id("judge-form")
    expect(form.locator("#id_kind")).to_have_value(kind)
    expect(form.locator("#id_name")).to_be_visible()
    for name in sorted(EVERY):
        expect(form.locator(f"#id_{name}")).to_have_count(1 if name in FIELDS[kind] else 0)


def test_the_form_shows_only_the_chosen_kinds_fields(browser, page: Page, ml_engineer, monkeypatch):
    """The page opens on the reward-model kind: its run and tie band, no template nor endpoint
    (before: all eleven fields of the three kinds at once). Choosing "OpenAI-compatible endpoint"
    reloads with ?kind=openai and the endpoint's fields; "Local LLM" with the model, template and
    token budget. The endpoint judge filled in there is created as kind openai."""
    monkeypatch.setattr("monitoring.services.judges.task_send", lambda *args, **kwargs: None)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    project_get_or_create(slug="judged")
    log_in(page, ml_engineer)
    page.goto("/monitoring/projects/judged/judges/")
    _expect_only(page, "reward_model")
    page.select_option("#id_kind", "openai")
    expect(page).to_have_url(re.compile(r"/judges/\?kind=openai$"))
    _expect_only(page, "openai")
    page.select_option("#id_kind", "local_llm")
    expect(page).to_have_url(re.compile(r"/judges/\?kind=local_llm$"))
    _expect_only(page, "local_llm")
    page.select_option("#id_kind", "openai")
    _expect_only(page, "openai")
    page.fill("#id_name", "served")
    page.fill("#id_endpoint_url", "http://vllm-host:8000/v1")
    page.fill("#id_served_model", "qwen")
    page.get_by_role("button", name="Create and run").click()
    expect(page.locator("[data-testid=judges]")).to_contain_text("served v1")
    judge = Judge.objects.get()
    assert (judge.kind, judge.model_name, judge.endpoint_url) == (
        "openai",
        "qwen",
        "http://vllm-host:8000/v1",
    )
    assert problems == []

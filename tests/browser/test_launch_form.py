"""The launch form in a real browser, as a new ML engineer uses it: for each kind (rm, dpo, simpo,
orpo, kto, ppo, rloo, grpo) and each preset, open the form from the kind picker, keep every default, save,
then "Save and launch"; the run is queued on the gpu queue. Then the kind switch (the select reloads
the form) and a post whose kind differs from the form's (refused). Every page is checked for
Content-Security-Policy violations and page errors.

Launching is checked up to the queue: the Celery task is recorded instead of sent (the live server
runs in this process), so no worker and no training are needed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from common.roles import ML_ENGINEER
from tests.factories import UserFactory, snapshot_of_pairs, training_run
from training import tasks
from training.models import TrainingRun
from training.recipes.presets import PRESETS

PASSWORD = "correct horse battery"  # UserFactory's password
SCREENSHOTS = "/tmp/concord-launch-form-{}.png"  # noqa: S108 - for humans to look at, never asserted on


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, list, str]]:
    """(task name, args, queue) of each training task the services send."""
    calls: list[tuple[str, list, str]] = []

    def record(*, args, queue, **_):
        calls.append((tasks.run_training_task.name, list(args), queue))

    monkeypatch.setattr(tasks.run_training_task, "apply_async", record)
    return calls


@pytest.fixture
def world(browser, live_server, settings, tmp_path):
    """An ML engineer, a snapshot of a small export, and a succeeded reward-model run (the RL kinds
    need one). Requests ``browser`` first, so a missing Chromium skips before any data is made."""
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    snapshot = snapshot_of_pairs(slug="launch-form")
    reward = training_run(snapshot=snapshot, kind="rm", name="reward v1")
    TrainingRun.objects.filter(pk=reward.pk).update(
        status="succeeded", summary={"eval/accuracy": 0.75}
    )
    return {"engineer": engineer, "snapshot": snapshot, "reward": reward}


@pytest.fixture
def engineer_page(page: Page, world) -> Iterator[tuple[Page, list[str]]]:
    """The engineer logged in; the list collects CSP reports, page errors and server errors."""
    problems: list[str] = []

    def console(msg) -> None:
        # A failed load (the favicon's 404) is not the page's fault; server errors are caught below.
        if "Content Security Policy" in msg.text or (
            msg.type == "error" and not msg.text.startswith("Failed to load resource")
        ):
            problems.append(f"console: {msg.text}")

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "response",
        lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 500 else None,
    )
    page.goto("/accounts/login/")
    page.fill("#id_username", world["engineer"].username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).not_to_have_url(re.compile(r"/accounts/login/"))
    yield page, problems
    assert problems == []


@pytest.mark.parametrize("kind", ["rm", "dpo", "simpo", "orpo", "kto", "ppo", "rloo", "grpo"])
def test_each_kind_saves_and_launches_with_the_defaults_of_every_preset(
    kind, engineer_page, world, sent
):
    """From the snapshot admin's "Train on this export" link, the kind picker, then each preset's
    form: keep every default (name, and for PPO / RLOO the reward model, chosen; GRPO's comes
    chosen), "Save and continue editing" gives a draft holding the preset's values; "Save and
    launch" queues it, one task ``training.tasks.run_training_task`` on the gpu queue, audited
    created then launched."""
    page, _ = engineer_page
    snapshot, reward = world["snapshot"], world["reward"]
    for preset in PRESETS:
        page.goto("/admin/training/datasetsnapshot/")
        page.get_by_role("link", name="Train on this export").click()
        expect(page.get_by_test_id("picker-snapshot")).to_contain_text(str(snapshot))
        page.locator(f'.kind-card[data-kind="{kind}"]').get_by_role(
            "link", name=preset.label
        ).click()
        expect(page.get_by_test_id("run-kind")).to_have_text(TrainingRun.Kind(kind).label)
        expect(page.locator("#id_snapshot")).to_have_value(str(snapshot.pk))
        page.fill("#id_name", f"{kind} {preset.name}")
        if kind in ("ppo", "rloo"):
            page.select_option(
                "#id_reward_model_run",
                label=f"reward v1 · Reward model #{reward.pk} · eval accuracy 0.750",
            )
        page.get_by_role("button", name="Save and continue editing").click()
        expect(page.locator("ul.messagelist")).to_contain_text("was added successfully")

        run = TrainingRun.objects.get(name=f"{kind} {preset.name}")
        assert (run.kind, run.status) == (kind, "draft")
        for name, value in preset.for_kind(kind).items():
            stored = list(value) if isinstance(value, tuple) else value  # JSON has lists
            assert run.config[name] == stored, (preset.name, name)
        assert run.reward_model_run_id == (reward.pk if kind in ("ppo", "rloo", "grpo") else None)

        page.get_by_test_id("save-and-launch").click()
        expect(page.locator("ul.messagelist")).to_contain_text(
            f"Saved and launched run #{run.pk}: queued on the gpu queue."
        )
        run.refresh_from_db()
        assert run.status == "queued"
        assert sent[-1] == ("training.tasks.run_training_task", [run.pk], "gpu")
        assert list(run.events.values_list("action", flat=True)) == ["created", "launched"]
    assert len(sent) == len(PRESETS)


def test_rl_kinds_say_they_need_a_reward_model_and_save_with_the_newest_chosen(
    engineer_page, world
):
    """With no succeeded reward model, the PPO and RLOO cards say they need one, with a link to
    the reward model's CPU preset; the GRPO card says a reward model is one of its sources, and
    its CPU preset saves at its defaults (a verifiable reward, length_penalty, no reward model).
    Once two reward models have succeeded, the PPO, RLOO and GRPO CPU forms save at their
    defaults with the newer one chosen, and no longer link to training one."""
    page, _ = engineer_page
    snapshot, reward = world["snapshot"], world["reward"]
    TrainingRun.objects.filter(pk=reward.pk).update(status="failed")
    page.goto(f"/admin/training/trainingrun/add/?snapshot={snapshot.pk}")
    ppo_note = page.get_by_test_id("reward-model-note-ppo")
    expect(ppo_note).to_contain_text(
        "PPO needs a succeeded reward-model run to score its rollouts: none has succeeded yet."
    )
    expect(ppo_note.get_by_role("link", name="Train a reward model")).to_have_attribute(
        "href", f"/admin/training/trainingrun/add/?snapshot={snapshot.pk}&kind=rm&preset=cpu"
    )
    expect(page.get_by_test_id("reward-model-note-rloo")).to_contain_text("RLOO needs")
    expect(page.get_by_test_id("reward-model-note-grpo")).to_contain_text(
        "GRPO scores with verifiable rewards, a succeeded reward-model run, or both"
    )
    expect(page.get_by_test_id("reward-model-note-dpo")).to_have_count(0)
    page.goto(f"/admin/training/trainingrun/add/?kind=ppo&preset=cpu&snapshot={snapshot.pk}")
    expect(page.get_by_test_id("reward-model-note")).to_contain_text("none has succeeded yet")

    page.goto(f"/admin/training/trainingrun/add/?kind=grpo&preset=cpu&snapshot={snapshot.pk}")
    page.fill("#id_name", "grpo alone")
    page.get_by_role("button", name="Save and continue editing").click()
    expect(page.locator("ul.messagelist")).to_contain_text("was added successfully")
    alone = TrainingRun.objects.get(name="grpo alone")
    assert alone.reward_model_run is None
    assert alone.config["rewards"] == ['length_penalty {"target": 60}']

    older = training_run(snapshot=snapshot, kind="rm", name="reward v0")
    TrainingRun.objects.filter(pk=older.pk).update(
        status="succeeded", finished_at=timezone.now() - timedelta(hours=1)
    )
    TrainingRun.objects.filter(pk=reward.pk).update(status="succeeded", finished_at=timezone.now())
    for kind in ("ppo", "rloo", "grpo"):
        page.goto(f"/admin/training/trainingrun/add/?kind={kind}&preset=cpu&snapshot={snapshot.pk}")
        expect(page.get_by_test_id("reward-model-note")).not_to_contain_text("none has succeeded")
        page.fill("#id_name", f"{kind} at defaults")
        page.get_by_role("button", name="Save and continue editing").click()
        expect(page.locator("ul.messagelist")).to_contain_text("was added successfully")
        assert TrainingRun.objects.get(name=f"{kind} at defaults").reward_model_run_id == reward.pk


def test_the_reward_models_cpu_preset_trains_minilm(engineer_page, world):
    """The reward model's "Quick look on CPU" form chooses the packaged all-MiniLM-L6-v2 as its
    base (the README's recommendation; SmolLM2 took 8.7 minutes for 15 steps); the standard preset
    keeps the installation's default model, and DPO's CPU preset a policy model."""
    page, _ = engineer_page
    snapshot = world["snapshot"]
    page.goto(f"/admin/training/trainingrun/add/?kind=rm&preset=cpu&snapshot={snapshot.pk}")
    expect(page.locator("#id_base_model")).to_have_value("all-minilm-l6-v2")
    page.fill("#id_name", "rm on cpu")
    page.get_by_role("button", name="Save and continue editing").click()
    expect(page.locator("ul.messagelist")).to_contain_text("was added successfully")
    assert TrainingRun.objects.get(name="rm on cpu").base_model == "all-minilm-l6-v2"
    page.goto(f"/admin/training/trainingrun/add/?kind=rm&preset=standard&snapshot={snapshot.pk}")
    expect(page.locator("#id_base_model")).to_have_value("smollm2-135m-instruct")
    page.goto(f"/admin/training/trainingrun/add/?kind=dpo&preset=cpu&snapshot={snapshot.pk}")
    expect(page.locator("#id_base_model")).to_have_value("smollm2-135m-instruct")


def test_a_lora_run_saves_its_adapter_settings_and_shows_them_on_the_run_pages(
    engineer_page, world
):
    """On the DPO form, the closed "LoRA" section opens and takes rank 16, alpha 32, two target
    layers (one a line) and merge_lora; the draft's config holds them (the defaults, rank 0, are
    saved by the test above), and the runs list and the run's page say "LoRA r=16 alpha=32,
    merged". A rank of -1 is refused on the field, nothing saved."""
    page, _ = engineer_page
    page.goto(f"/admin/training/trainingrun/add/?kind=dpo&snapshot={world['snapshot'].pk}")
    rank = page.locator("#id_cfg__lora_rank")
    expect(rank).to_have_value("0")
    expect(rank).to_be_hidden()  # the section starts closed
    page.locator("summary", has_text="LoRA").click()
    page.fill("#id_name", "dpo lora")
    page.fill("#id_cfg__lora_rank", "-1")
    page.get_by_role("button", name="Save and continue editing").click()
    expect(page.locator("#content-main")).to_contain_text("must be >= 0")
    assert not TrainingRun.objects.filter(name="dpo lora").exists()

    expect(rank).to_be_visible()  # a section with an error is shown open (no summary to click)
    page.fill("#id_cfg__lora_rank", "16")
    page.fill("#id_cfg__lora_target_modules", "q_proj\nv_proj")
    page.check("#id_cfg__merge_lora")
    page.get_by_role("button", name="Save and continue editing").click()
    expect(page.locator("ul.messagelist")).to_contain_text("was added successfully")
    run = TrainingRun.objects.get(name="dpo lora")
    assert run.config["lora_rank"] == 16 and run.config["merge_lora"] is True
    assert run.config["lora_target_modules"] == ["q_proj", "v_proj"]
    page.goto("/monitoring/runs/")
    expect(page.locator(f'tr[data-run="{run.pk}"] [data-testid="run-lora"]')).to_have_text(
        "LoRA r=16 alpha=32, merged"
    )
    page.goto(f"/monitoring/runs/{run.pk}/")
    expect(page.get_by_test_id("run-lora")).to_have_text("LoRA r=16 alpha=32, merged")


def test_choosing_another_kind_reloads_the_form(engineer_page, world):
    """On the DPO form, choosing "Reward model" reloads the page with the reward model's settings
    (beta gone, eval_fraction there, its own learning rate), keeping the snapshot."""
    page, _ = engineer_page
    snapshot = world["snapshot"]
    page.goto(f"/admin/training/trainingrun/add/?kind=dpo&snapshot={snapshot.pk}")
    expect(page.locator("#id_cfg__beta")).to_be_visible()
    expect(page.locator("#id_cfg__learning_rate")).to_have_value(re.compile(r"^(5e-07|0.0000005)$"))
    page.screenshot(path=SCREENSHOTS.format("dpo"), full_page=True)
    page.select_option("#id_kind", "rm")
    expect(page).to_have_url(re.compile(r"kind=rm"))
    expect(page.get_by_test_id("run-kind")).to_have_text("Reward model")
    expect(page.locator("#id_cfg__beta")).to_have_count(0)
    expect(page.locator("#id_cfg__eval_fraction")).to_have_value("0.1")
    expect(page.locator("#id_cfg__learning_rate")).to_have_value(re.compile(r"^(1e-05|0.00001)$"))
    expect(page.locator("#id_snapshot")).to_have_value(str(snapshot.pk))
    page.goto(f"/admin/training/trainingrun/add/?snapshot={snapshot.pk}")
    page.screenshot(path=SCREENSHOTS.format("picker"), full_page=True)


def test_a_post_whose_kind_differs_from_the_form_is_refused(engineer_page, world):
    """A DPO form whose kind select says "Reward model" without the reload (the reload script
    removed): saving is refused with a message and no run is created."""
    page, _ = engineer_page
    page.goto(f"/admin/training/trainingrun/add/?kind=dpo&snapshot={world['snapshot'].pk}")
    page.fill("#id_name", "mixed kinds")
    # Replace the select by a copy without the change listener, set to another kind.
    page.evaluate(
        """() => { const s = document.querySelector('#id_kind');
                   const copy = s.cloneNode(true); s.replaceWith(copy); copy.value = 'rm'; }"""
    )
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".errornote, .errorlist").first).to_be_visible()
    expect(page.locator("#content-main")).to_contain_text(
        "This form holds DPO settings but the kind sent is Reward model: nothing was saved."
    )
    assert not TrainingRun.objects.filter(name="mixed kinds").exists()

"""The run pages in a real browser: a run's charts (uPlot) show a one-point metric with a sensible
axis, hover values and live updates, the summary table, the phase and the checkpoints; the compare
page overlays two runs; the samples table fills while a tiny RLOO run trains on a Celery worker.

The first tests write metrics straight to the live server's database (no training); the last needs
PostgreSQL and Redis like tests/browser/test_training_run.py, and is skipped without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings
from django.test import Client
from playwright.sync_api import Page, expect

from common.roles import ML_ENGINEER, REVIEWER
from tests.factories import UserFactory, snapshot_of_pairs
from tests.helpers import tiny_models
from tests.helpers import worker as worker_helpers
from tests.helpers.tiny_models import PAIRS, tiny_llama
from tests.helpers.worker import Worker
from training import progress_services, services
from training.models import Checkpoint, TrainingRun

pytestmark = [pytest.mark.browser]

LIVE_TIMEOUT_MS = 120_000
SCREENSHOT = "/tmp/concord-run-pages.png"  # noqa: S108 - for humans to look at, never asserted on

tiny_tokenizer_dir = tiny_models.tiny_tokenizer_dir  # the fixtures, shared
stack = worker_helpers.stack


@pytest.fixture
def snapshot(browser, settings, tmp_path):
    """A snapshot of the 8 tiny preference pairs (requests ``browser`` first: no Chromium, no data)."""
    settings.EXPORT_DIR = tmp_path / "exports"
    return snapshot_of_pairs(slug="browser-run-pages")


def _log_in(page: Page, live_server, user) -> None:
    """Put a logged-in session cookie into the page's context (no login form: faster)."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies(
        [{"name": django_settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
    )


def _csp_problems(page: Page) -> list[str]:
    problems: list[str] = []
    page.on(
        "console",
        lambda msg: (
            problems.append(msg.text)
            if msg.type == "error" or "Content Security Policy" in msg.text
            else None
        ),
    )
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    return problems


def _run(snapshot, *, kind: str, status: str = "running", name: str = "", **fields) -> TrainingRun:
    return TrainingRun.objects.create(
        name=name or f"browser {kind}", kind=kind, base_model="smollm2-135m-instruct",
        snapshot=snapshot, status=status, **fields,
    )  # fmt: skip


def test_a_runs_charts_show_one_point_hover_values_and_update_live(
    snapshot, live_server, page: Page, tmp_path
) -> None:
    """A running reward-model run: loss at steps 1-3, eval accuracy once (0.75 at step 3). The
    accuracy chart draws its single point on a y-axis of 0.75 +- 10% (not 0.25-1.25), a training
    accuracy of 1.0 on 0.9-1.0 (a share never above 1); loss and
    accuracy sit in their groups; the summary gives each metric's last and best value; hovering the
    loss chart shows a value in its legend; the phase shows before any step; a checkpoint marked as
    the result keeps its "(result)" mark through the polls; new steps written while the page is
    open join the chart without a reload; no stopping panel on a reward model, and no "start a
    human-eval round" link on its checkpoint (a reward model answers no prompt)."""
    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    run = _run(snapshot, kind="rm", total_steps=10)
    progress_services.run_phase_record(run_id=run.pk, phase="tokenising", done=3, total=4)
    problems = _csp_problems(page)
    _log_in(page, live_server, engineer)

    page.goto(f"/monitoring/runs/{run.pk}/")
    expect(page.get_by_test_id("run-phase")).to_have_text("tokenising, batch 3 of 4")
    for step, loss in ((1, 0.9), (2, 0.7), (3, 0.6)):
        services.metrics_record(run_id=run.pk, step=step, metrics={"loss": loss})
    services.metrics_record(run_id=run.pk, step=3, metrics={"eval/accuracy": 0.75, "accuracy": 1.0})
    (tmp_path / "step-3").mkdir()  # a checkpoint is listed while its folder exists
    checkpoint = Checkpoint.objects.create(run=run, step=3, path=str(tmp_path / "step-3"))
    TrainingRun.objects.filter(pk=run.pk).update(step=3, phase="", result_checkpoint=checkpoint)

    accuracy = page.locator(
        '.chart-group[data-group="evaluation"] figure[data-metric="eval/accuracy"]'
    )
    expect(accuracy).to_have_attribute("data-points", "1", timeout=LIVE_TIMEOUT_MS)
    expect(
        page.locator('.chart-group[data-group="loss"] figure[data-metric="loss"]')
    ).to_have_attribute("data-points", "3")
    # The poll that brought the accuracy may have come before the run's phase was cleared and its
    # checkpoint written (the test writes them one after another): the next poll, 2 s on, brings
    # them, later under load, hence the live timeout.
    expect(page.get_by_test_id("run-phase")).to_be_hidden(timeout=LIVE_TIMEOUT_MS)
    low, high = page.evaluate(
        "() => { const y = ConcordCharts.live['eval/accuracy'].plot.scales.y; return [y.min, y.max]; }"
    )
    assert low == pytest.approx(0.675) and high == pytest.approx(0.825)
    # A flat training accuracy of 1.0: 0.9-1.0, no impossible share above 1.
    expect(page.locator('figure[data-metric="accuracy"]')).to_have_attribute("data-points", "1")
    low, high = page.evaluate(
        "() => { const y = ConcordCharts.live['accuracy'].plot.scales.y; return [y.min, y.max]; }"
    )
    assert low == pytest.approx(0.9) and high == pytest.approx(1.0)

    summary = page.get_by_test_id("summary")
    expect(summary.locator('tr[data-metric="eval/accuracy"] td').nth(2)).to_have_text("0.75")
    expect(summary.locator('tr[data-metric="loss"] td').nth(4)).to_have_text("0.6 (lowest)")

    loss_chart = page.locator('figure[data-metric="loss"] .u-over')
    loss_chart.hover()  # scrolled into view, the pointer at its middle
    legend_value = (
        page.locator('figure[data-metric="loss"] .u-legend .u-series').nth(1).locator(".u-value")
    )
    expect(legend_value).to_have_text(re.compile(r"^0\.[0-9]+$"))

    rows = page.get_by_test_id("checkpoints").locator("tbody tr")
    expect(rows).to_have_count(1, timeout=LIVE_TIMEOUT_MS)
    expect(rows.first).to_contain_text("(result)", timeout=LIVE_TIMEOUT_MS)
    expect(rows.first).to_contain_text("loss 0.6")
    expect(rows.first.get_by_role("link", name="start a human-eval round")).to_have_count(0)

    page.evaluate("window.concordSamePage = true")
    services.metrics_record(run_id=run.pk, step=4, metrics={"loss": 0.5})
    expect(page.locator('figure[data-metric="loss"]')).to_have_attribute(
        "data-points", "4", timeout=LIVE_TIMEOUT_MS
    )
    expect(summary.locator('tr[data-metric="loss"] td').nth(2)).to_have_text("0.5")
    expect(rows.first).to_contain_text("(result)")  # the polls kept the server's mark
    assert page.evaluate("window.concordSamePage") is True
    expect(page.get_by_test_id("stopping-panel")).to_have_count(0)

    # Zoom: drag across the first half of the loss chart's steps, double-click to zoom out.
    def x_scale():
        return page.evaluate(
            "() => { const x = ConcordCharts.live.loss.plot.scales.x; return [x.min, x.max]; }"
        )

    assert x_scale() == [1, 4]
    loss_chart.scroll_into_view_if_needed()
    box = loss_chart.bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    low, high = x_scale()
    assert 1 <= low < high < 3
    loss_chart.dblclick()
    page.wait_for_function("() => ConcordCharts.live.loss.plot.scales.x.max === 4")

    # Smoothing adds the smoothed line and keeps the raw one.
    page.locator("#smoothing").fill("0.6")
    expect(page.locator('figure[data-metric="loss"] .u-legend .u-series')).to_have_count(3)
    expect(page.locator('figure[data-metric="loss"] .u-legend')).to_contain_text("loss (smoothed)")
    low, high = page.evaluate(
        "() => { const y = ConcordCharts.live['eval/accuracy'].plot.scales.y; return [y.min, y.max]; }"
    )
    assert low == pytest.approx(0.675) and high == pytest.approx(0.825)  # still flat when smoothed
    page.screenshot(path=SCREENSHOT, full_page=True)
    assert problems == []


def test_a_reward_models_loading_and_tokenising_show_before_its_first_step(
    snapshot, live_server, page: Page
) -> None:
    """The reward-model recipe reports its work before step 1 (tests/training/
    test_reward_model_recipe.py): the run page shows "loading the reward model" (nothing counted:
    no "batch 0"), then, without a reload, "tokenising pairs, batch 1 of 3"; the runs list says
    the same in short; the first step hides it."""
    from training.recipes.reward_model import LOADING_PHASE, TOKENISING_PHASE

    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    run = _run(snapshot, kind="rm", total_steps=20)
    progress_services.run_phase_record(run_id=run.pk, phase=LOADING_PHASE, done=0, total=0)
    _log_in(page, live_server, engineer)
    page.goto("/monitoring/runs/")
    expect(page.get_by_test_id("list-phase")).to_have_text("loading the reward model")
    page.goto(f"/monitoring/runs/{run.pk}/")
    phase = page.get_by_test_id("run-phase")
    expect(phase).to_have_text("loading the reward model")
    progress_services.run_phase_record(run_id=run.pk, phase=TOKENISING_PHASE, done=1, total=3)
    expect(phase).to_have_text("tokenising pairs, batch 1 of 3", timeout=LIVE_TIMEOUT_MS)
    progress_services.run_phase_clear(run_id=run.pk)
    services.run_progress(run_id=run.pk, step=1, total_steps=20)
    expect(phase).to_be_hidden(timeout=LIVE_TIMEOUT_MS)


def test_a_finished_runs_page_lists_the_checkpoints_on_disk_and_its_final_model(
    snapshot, live_server, page: Page, tmp_path
) -> None:
    """A 6-step DPO run saved checkpoints at steps 2 and 4, and keep_checkpoints removed step 2's
    folder; it succeeds with its final model in ``final/``. The run page lists steps 6 (the final
    model, with its "start a human-eval round" link) and 4, not 2; the roll-back select and the
    round form offer steps 6 and 4 only; a roll back posted on step 2 anyway (a page opened
    before the prune) is refused with a plain sentence, and no traceback text shows."""
    reviewer = UserFactory(username="rita", role=REVIEWER)
    output = tmp_path / "run"
    run = _run(snapshot, kind="dpo", total_steps=6, output_dir=str(output))
    stale, kept = (
        Checkpoint.objects.create(run=run, step=step, path=str(output / f"step-{step}"))
        for step in (2, 4)
    )
    (output / "step-4").mkdir(parents=True)  # step 2's folder was pruned
    (output / "final").mkdir()
    services.metrics_record(run_id=run.pk, step=6, metrics={"loss": 0.5})
    services.run_finish(
        run_id=run.pk,
        status="succeeded",
        summary={"steps": 6, "final_model_dir": str(output / "final")},
    )
    final = run.checkpoints.get(step=6)
    problems = _csp_problems(page)
    _log_in(page, live_server, reviewer)

    page.goto(f"/monitoring/runs/{run.pk}/")
    rows = page.get_by_test_id("checkpoints").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("td").nth(1)).to_have_text(str(output / "final"))
    expect(rows.nth(0)).to_contain_text("loss 0.5")
    expect(rows.nth(0).get_by_role("link", name="start a human-eval round")).to_have_attribute(
        "href", f"/monitoring/eval/?checkpoint={final.pk}"
    )
    expect(rows.nth(1).locator("td").first).to_have_text("4")
    rollback = page.get_by_test_id("decision-form").locator('select[name="checkpoint"] option')
    expect(rollback).to_have_text(["checkpoint…", "step 6", "step 4"])

    # A page opened before the prune still offers step 2: the roll back is refused in words.
    page.evaluate(
        """(pk) => { const s = document.querySelector('select[name="checkpoint"]');
                     const o = document.createElement('option'); o.value = String(pk);
                     o.textContent = 'step 2'; s.appendChild(o); s.value = String(pk); }""",
        stale.pk,
    )
    page.get_by_test_id("decision-form").locator('input[value="rollback"]').check()
    page.get_by_role("button", name="Record decision").click()
    expect(page.locator("body")).to_contain_text(
        f"the checkpoint of step 2 of run #{run.pk} is no longer on disk (runs keep only their "
        "newest keep_checkpoints checkpoints); choose another checkpoint"
    )
    assert "Error:" not in page.locator("body").inner_text()
    run.refresh_from_db()
    assert run.result_checkpoint is None

    page.goto(f"/monitoring/eval/?checkpoint={final.pk}")
    choices = page.locator("#id_checkpoint option")
    expect(choices).to_have_text(
        [
            "---------",
            f"browser dpo · DPO #{run.pk} · step 6",
            f"browser dpo · DPO #{run.pk} · step 4",
        ]
    )
    expect(page.locator("#id_checkpoint")).to_have_value(str(final.pk))
    assert kept.pk != stale.pk
    assert problems == []


# A warm-up to 5e-06 over 4 steps, then a linear decay: a schedule with a kink at step 4.
LEARNING_RATES = {1: 1.25e-06, 2: 2.5e-06, 3: 3.75e-06, 4: 5e-06, 5: 3.75e-06, 6: 2.5e-06,
                  7: 1.25e-06, 8: 5e-07}  # fmt: skip


def _scheduled_run(snapshot, tmp_path) -> TrainingRun:
    """A running GRPO run that logged that learning rate and a falling loss at steps 1-8, saved
    a checkpoint at step 8 and kept one sample there that did not end with EOS."""
    run = _run(snapshot, kind="grpo", total_steps=8)
    for step, rate in LEARNING_RATES.items():
        services.metrics_record(
            run_id=run.pk, step=step, metrics={"learning_rate": rate, "loss": 1.0 / step}
        )
    (tmp_path / "step-8").mkdir()
    Checkpoint.objects.create(run=run, step=8, path=str(tmp_path / "step-8"))
    progress_services.samples_record(
        run_id=run.pk, step=8,
        samples=[{"prompt": "p", "response": "r", "reward": 0.5, "finished": 0.0, "length": 32}],
    )  # fmt: skip
    return run


def test_small_values_read_in_full_on_a_runs_page(snapshot, live_server, page: Page, tmp_path):
    """A learning rate of 5e-07 reads "5e-07" in the checkpoint row (server-rendered; before:
    "learning_rate 0.0000") and as the summary's last value (before: "5.000e-7"), its maximum
    "5e-06". A sample that did not end with EOS says so in words (before: "finished 0")."""
    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    run = _scheduled_run(snapshot, tmp_path)
    _log_in(page, live_server, engineer)
    page.goto(f"/monitoring/runs/{run.pk}/")
    row = page.get_by_test_id("checkpoints").locator("tbody tr").first
    expect(row.locator(".ck-metric", has_text="learning_rate")).to_have_text("learning_rate 5e-07")
    summary = page.get_by_test_id("summary").locator('tr[data-metric="learning_rate"] td')
    expect(summary.nth(2)).to_have_text("5e-07")
    expect(summary.nth(7)).to_have_text("5e-06")
    figures = page.get_by_test_id("samples").locator("tbody tr.sample td").nth(3)
    expect(figures).to_have_text("length 32 · no EOS (cut at max_new_tokens)")


def test_the_learning_rate_is_never_smoothed_and_every_tick_label_fits(
    snapshot, live_server, page: Page, tmp_path
):
    """With the smoothing slider at 0.6 the loss chart gains a smoothed line, but the learning
    rate (a schedule) keeps its logged values exactly (its kink at step 4 stays at 5e-06) and one
    line, and says why. On every chart, each y tick label fits the axis's width as the canvas
    measures it (before: 62 px held "5.000e-6" cut to ".000e-6")."""
    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    run = _scheduled_run(snapshot, tmp_path)
    _log_in(page, live_server, engineer)
    page.goto(f"/monitoring/runs/{run.pk}/")
    lr = page.locator('figure[data-metric="learning_rate"]')
    expect(lr).to_have_attribute("data-points", "8")
    page.locator("#smoothing").fill("0.6")
    expect(page.locator('figure[data-metric="loss"] .u-legend .u-series')).to_have_count(3)
    expect(lr.locator(".u-legend .u-series")).to_have_count(2)
    expect(lr.locator(".chart-note")).to_have_text("a schedule: never smoothed")
    drawn = page.evaluate("() => ConcordCharts.live.learning_rate.plot.data[1]")
    assert drawn == [LEARNING_RATES[step] for step in range(1, 9)]
    fits = page.evaluate(
        """() => Object.entries(ConcordCharts.live).map(([name, chart]) => {
             const u = chart.plot, axis = u.axes[1];
             u.ctx.font = axis.font[0];
             const widest = Math.max(...axis._values.map(
               (v) => u.ctx.measureText(v).width / (window.devicePixelRatio || 1)));
             return [name, axis._values, widest <= axis._size - axis.ticks.size - axis.gap];
           })"""
    )
    assert {name for name, _, _ in fits} == {"learning_rate", "loss"}
    assert all(ok for _, _, ok in fits), fits
    labels = next(values for name, values, _ in fits if name == "learning_rate")
    assert all(".000" not in label for label in labels), labels


def test_the_compare_page_overlays_two_runs(snapshot, live_server, page: Page) -> None:
    """Two finished DPO runs with different beta: the runs list fits 1280 px and shows their DPO
    headline; filtered by kind, ticked and compared, their loss lines share one chart (two lines),
    and the config table puts beta first, highlighted."""
    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    first = _run(snapshot, kind="dpo", status="succeeded", name="beta 0.1", config={"beta": 0.1})
    second = _run(snapshot, kind="dpo", status="succeeded", name="beta 0.3", config={"beta": 0.3})
    for step in range(1, 6):
        services.metrics_record(run_id=first.pk, step=step, metrics={"loss": 1.0 / step})
        services.metrics_record(run_id=second.pk, step=step, metrics={"loss": 0.8 / step})
    services.metrics_record(run_id=second.pk, step=5, metrics={"rewards/accuracy": 1.0})
    problems = _csp_problems(page)
    _log_in(page, live_server, engineer)

    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/monitoring/runs/")
    expect(page.get_by_test_id("runs").locator("tbody tr")).to_have_count(2)
    # The list fits a 1280 px window: no sideways scrolling.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    expect(page.get_by_test_id("headline").first).to_contain_text("reward accuracy")
    page.locator('select[name="kind"]').select_option("dpo")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"kind=dpo"))
    page.get_by_label(f"compare run #{first.pk}").check()
    page.get_by_label(f"compare run #{second.pk}").check()
    page.get_by_test_id("compare-button").click()
    expect(page).to_have_url(re.compile(r"/monitoring/runs/compare/\?runs="))
    loss = page.locator('figure[data-metric="loss"]')
    expect(loss).to_have_attribute("data-runs", "2")
    expect(loss).to_have_attribute("data-points", "10")
    expect(loss.locator(".u-legend .u-series")).to_have_count(3)  # step + one line per run
    expect(page.locator('figure[data-metric="rewards/accuracy"]')).to_have_attribute(
        "data-runs", "1"
    )
    first_row = page.get_by_test_id("compare-config").locator("tbody tr").first
    expect(first_row).to_have_attribute("data-setting", "beta")
    expect(first_row).to_have_class(re.compile("differs"))
    # The runs list shows the newest run first, so the page takes them in that order.
    expect(first_row.locator("td")).to_have_text(["beta", "0.3", "0.1"])
    assert problems == []


@pytest.fixture
def worker(browser, stack) -> Iterator[Worker]:
    process = Worker(stack)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_the_samples_table_fills_while_an_rloo_run_trains(
    snapshot, worker, stack, tiny_tokenizer_dir, tmp_path, live_server, page: Page
) -> None:
    """A tiny RLOO run (a succeeded tiny reward-model run scores it) launched on the worker keeps 4
    samples every 5 steps: the run page's samples table shows them while the run is running,
    with the prompts' text and a reward, and offers each evaluation step."""
    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    rm_dir = tmp_path / "rm-run"
    tiny_llama(rm_dir / "final", tiny_tokenizer_dir, seed=1, for_classification=True)
    reward_model = _run(snapshot, kind="rm", status="succeeded", output_dir=str(rm_dir))
    run = services.run_create(
        name="browser rloo", kind="rloo", base_model="smollm2-135m-instruct", snapshot=snapshot,
        reward_model_run=reward_model, created_by=engineer,
        config={"max_steps": 400, "batch_size": 2, "rloo_k": 2, "max_new_tokens": 4,
                "max_length": 64, "eval_every": 5, "eval_prompts": 0, "checkpoint_every": 0,
                "learning_rate": 1e-4, "epochs": 400},
    )  # fmt: skip
    services.run_launch(run=run, user=engineer)
    problems = _csp_problems(page)
    _log_in(page, live_server, engineer)

    page.goto(f"/monitoring/runs/{run.pk}/")
    samples = page.get_by_test_id("samples").locator("tbody tr.sample")
    expect(samples.first).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(page.get_by_test_id("run-status")).to_have_text("Running")
    expect(samples).to_have_count(4)
    prompts = {p for p, _, _ in PAIRS}
    first_prompt = samples.first.locator("td").first.inner_text()
    assert first_prompt in prompts
    assert re.match(r"^-?[0-9.e+-]+$", samples.first.locator("td").nth(2).inner_text())
    page.wait_for_function(
        "() => document.querySelectorAll('#sample-step option').length >= 2",
        timeout=LIVE_TIMEOUT_MS,
    )
    steps = page.locator("#sample-step option").all_inner_texts()
    assert all(re.match(r"^step \d+ \(4\)$", s) for s in steps) and steps[0].startswith("step ")
    services.run_cancel(run=run, user=engineer)
    assert problems == []

"""docs/tutorial.md, followed step by step: its commands (read from the page itself) and its clicks.

"From a public dataset to a stopped model": import an HH-RLHF sample, an annotator labels and flags
pairs, the lead reads agreement, adjudicates and exports, an ML engineer trains a reward model and
a DPO policy from the admin's CPU preset, a reviewer runs an eval round on the DPO checkpoint and
records a decision on the stopping panel.

What stands in for the demo's machinery: the two Celery workers are this test draining the tasks
the services send (each run in-process, in order, as the worker would), and the registry's SmolLM2
is a tiny 2-layer Llama, so the whole tutorial takes seconds of training instead of minutes. With
``CONCORD_DOCS_SCREENSHOTS=1`` it also writes the documentation's screenshots (docs/img/).
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections.abc import Callable
from importlib import import_module
from io import StringIO
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.management import call_command
from playwright.sync_api import Page, expect

from annotation.models import Adjudication, Comparison, Flag, Judgement, Project
from annotation.selectors.agreement import dashboard_cache_key, refresh_pending_key
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER
from monitoring.models import EvalRound
from tests.factories import UserFactory
from tests.helpers import tiny_models
from tests.helpers.browser import PASSWORD
from tests.helpers.docs_screenshots import docs_screenshot
from tests.helpers.labelling_screen import switch_pair
from tests.helpers.tiny_models import tiny_llama
from training.models import TrainingRun

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
SMOLLM2 = "smollm2-135m-instruct"
# Modules that send tasks by name (common.jobs.task_send): the stand-in worker records them.
SENDERS = (
    "annotation.services.agreement",
    "annotation.services.clustering",
    "annotation.services.consensus",
    "annotation.services.export_jobs",
    "annotation.services.import_jobs",
    "training.services",
    "monitoring.services.eval_rounds",
    "monitoring.services.round_judges",
    "monitoring.services.judges",
)

tiny_tokenizer_dir = tiny_models.tiny_tokenizer_dir  # the session fixture, shared


def tutorial_commands(step: int) -> list[list[str]]:
    """The ``python manage.py ...`` lines of the tutorial's step ``step`` (its "## N." section),
    as argument lists for call_command, in the page's order."""
    text = TUTORIAL.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    (section,) = [s for s in sections if s.startswith(f"{step}. ")]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith("python manage.py "):
                commands.append(shlex.split(line)[2:])
    return commands


def run_step_commands(step: int) -> str:
    """Run the tutorial step's commands from the repository root; returns what they printed."""
    out = StringIO()
    for args in tutorial_commands(step):
        call_command(*args, stdout=out)
    return out.getvalue()


class StandInWorker:
    """Records the tasks services send (from the live server's thread too) and runs them here."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, tuple]] = []
        self.lock = threading.Lock()

    def send(self, name: str, *, args=(), **options) -> None:
        with self.lock:
            self.pending.append((name, tuple(args)))

    def drain(self) -> list[str]:
        """Run every recorded task, and those they send, in order; returns their names."""
        done = []
        while True:
            with self.lock:
                if not self.pending:
                    return done
                name, args = self.pending.pop(0)
            module, _, function = name.rpartition(".")
            getattr(import_module(module), function)(*args)  # the task's body, here and now
            done.append(name)


@pytest.fixture
def world(browser, settings, tmp_path, tiny_tokenizer_dir, monkeypatch):
    """The demo's people (an ML engineer, an annotator, a reviewer), a tiny model under SmolLM2's
    registry name, the run, export and cache folders in tmp_path, and the stand-in worker."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    models = tmp_path / "models"
    tiny_llama(models / SMOLLM2, tiny_tokenizer_dir)
    settings.CONCORD_MODELS_DIR = models
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    monkeypatch.chdir(ROOT)  # the tutorial's paths are relative to the repository
    worker = StandInWorker()
    for module in SENDERS:
        monkeypatch.setattr(f"{module}.task_send", worker.send)
    return {
        "worker": worker,
        "mel": UserFactory(username="mel", role=ML_ENGINEER, is_staff=True),
        "ana": UserFactory(username="ana", role=ANNOTATOR),
        "rita": UserFactory(username="rita", role=REVIEWER),
    }


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Wait until ``condition()`` holds (a write the page sends in the background)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} was not stored"
        time.sleep(0.1)


def log_in(page: Page, user) -> None:
    """Log out whoever is in, then log ``user`` in through the login form."""
    page.context.clear_cookies()
    page.goto("/accounts/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_test_id("username")).to_have_text(user.username)


def launch_quick_look(page: Page, *, kind: str, name: str, learning_rate: str) -> TrainingRun:
    """From the lead's export list: "Train on this export", the kind's "Quick look on CPU" card,
    a name and a learning rate, "Save and launch" (the tutorial's step 5)."""
    page.goto("/annotation/p/tutorial/manage/")
    page.get_by_test_id("train-on-export").first.click()
    page.locator(f'.kind-card[data-kind="{kind}"]').get_by_role(
        "link", name="Quick look on CPU"
    ).click()
    page.fill("#id_name", name)
    # The suite's tiny model stands in for the packaged ones (the reward model's preset picks
    # MiniLM, which the tutorial keeps).
    page.select_option("#id_base_model", SMOLLM2)
    page.fill("#id_cfg__learning_rate", learning_rate)
    page.get_by_test_id("save-and-launch").click()
    expect(page.locator("ul.messagelist")).to_contain_text("queued on the gpu queue")
    return TrainingRun.objects.get(name=name)


def test_the_tutorial_from_a_public_dataset_to_a_stopped_model(world, page: Page) -> None:
    """Every step of docs/tutorial.md works as written: 12 HH-RLHF pairs imported with their
    crowdworker's vote, 4 labelled and 1 flagged by ana, the flag adjudicated, agreement printed
    and shown, an export, a reward model and a DPO run that succeed, a round of the 6 new prompts
    rated by rita, and a roll back recorded on the DPO run's stopping panel."""
    worker, mel, ana, rita = world["worker"], world["mel"], world["ana"], world["rita"]

    # 1. Import a public dataset.
    printed = run_step_commands(1)
    assert "12 comparisons created" in printed, printed
    project = Project.objects.get(slug="tutorial")
    # Redis outlives the test database: an earlier test's report or pending mark under this
    # project's key would hold the dashboard's refresh back.
    cache.delete_many([dashboard_cache_key(project), refresh_pending_key(project)])
    assert Judgement.objects.filter(comparison__project=project).count() == 12

    # 2. Label a few pairs: the lead adds ana; ana labels four and flags one.
    log_in(page, mel)
    page.goto("/annotation/p/tutorial/members/")
    page.fill("#id_identifier", "ana")
    page.get_by_role("button", name="Add").click()
    expect(page.locator('tr[data-member="ana"]')).to_be_visible()
    log_in(page, ana)
    page.goto("/annotation/p/tutorial/label/")
    expect(page.get_by_test_id("left")).to_be_visible()
    docs_screenshot(page, "labelling")
    for key in ("1", "2", "Shift+Digit1", "1"):
        switch_pair(page, lambda key=key: (page.keyboard.press(key), page.keyboard.press("Enter")))
    page.keyboard.press("f")
    page.keyboard.press("Enter")
    _wait_for(lambda: Judgement.objects.filter(annotator=ana).count() == 4, "four judgements")
    _wait_for(lambda: Flag.objects.filter(annotator=ana).count() == 1, "the flag")

    # 3. Agreement: the command, the dashboard, the item browser and the adjudication queue.
    assert "gwet_ac1" in run_step_commands(3)
    log_in(page, mel)
    page.goto("/annotation/p/tutorial/agreement/")
    worker.drain()
    page.reload()
    expect(page.get_by_test_id("coefficients")).to_be_visible()
    docs_screenshot(page, "agreement-dashboard")
    page.goto("/annotation/p/tutorial/items/")
    expect(page.get_by_test_id("item-counts")).to_contain_text("12 comparisons")
    docs_screenshot(page, "item-browser")
    page.goto("/annotation/p/tutorial/adjudicate/")
    expect(page.get_by_test_id("adjudication-item")).to_be_visible()
    docs_screenshot(page, "adjudication")
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    _wait_for(lambda: Adjudication.objects.filter(decided_by=mel).exists(), "the verdict")
    # The verdict's POST answers with a redirect to the next item: let that navigation finish
    # before the next step's goto, which it would otherwise interrupt.
    page.wait_for_url(re.compile(r"/adjudicate/\?.*after="))

    # 4. Export a training set.
    run_step_commands(4)
    assert project.exports.count() >= 1

    # 5. Train a reward model and DPO (the worker's part runs here).
    rm = launch_quick_look(page, kind="rm", name="tutorial rm", learning_rate="0.001")
    dpo = launch_quick_look(page, kind="dpo", name="tutorial dpo", learning_rate="0.001")
    worker.drain()
    for run in (rm, dpo):
        run.refresh_from_db()
        assert run.status == "succeeded", run.error

    # 6. Watch the runs: a run's charts, and the two compared.
    page.goto(f"/monitoring/runs/{dpo.pk}/")
    expect(page.locator('figure.chart[data-metric="loss"]')).to_be_visible()
    docs_screenshot(page, "run-page", top=page.get_by_test_id("chart-controls"))
    page.goto("/monitoring/runs/")
    for run in (rm, dpo):
        page.get_by_label(f"compare run #{run.pk}").check()
    page.get_by_test_id("compare-button").click()
    expect(page).to_have_url(re.compile(r"/monitoring/runs/compare/"))
    docs_screenshot(page, "compare")

    # 7. A human-eval round on prompts the model never saw.
    run_step_commands(7)
    assert Comparison.objects.filter(project=project).count() == 18
    log_in(page, rita)
    page.goto(f"/monitoring/runs/{dpo.pk}/")
    page.get_by_test_id("checkpoints").get_by_role(
        "link", name="start a human-eval round"
    ).first.click()
    page.select_option("#id_project", "tutorial")
    page.select_option("#id_baseline_model", SMOLLM2)
    # The 6 new prompts, and those of pairs whose votes tied (ties are left out of exports).
    expect(page.locator("#id_size")).not_to_have_value("100")
    assert int(page.locator("#id_size").input_value()) >= 6
    page.get_by_role("button", name="Create round").click()
    expect(page).to_have_url(re.compile(r"/monitoring/eval/\d+/$"))
    worker.drain()
    round_ = EvalRound.objects.get()
    round_.refresh_from_db()
    assert round_.status == "open", round_.status
    page.goto(f"/monitoring/eval/{round_.pk}/rate/")
    docs_screenshot(page, "eval-rating")
    rated = 0
    while page.get_by_test_id("submit").count():
        page.keyboard.press("1")
        page.keyboard.press("Shift+Digit4")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        rated += 1
        assert rated <= 12
    page.goto(f"/monitoring/eval/{round_.pk}/")
    expect(page.get_by_test_id("round-stats")).to_be_visible()
    docs_screenshot(page, "eval-round")

    # 8. Decide on the stopping panel.
    page.goto(f"/monitoring/runs/{dpo.pk}/")
    panel = page.get_by_test_id("stopping-panel")
    expect(panel).to_be_visible()
    form = page.get_by_test_id("decision-form")
    form.locator('input[value="rollback"]').check()
    form.locator('select[name="checkpoint"]').select_option(index=1)
    page.fill("#decision-note", "tutorial: keep the final checkpoint")
    page.get_by_role("button", name="Record decision").click()
    expect(page.get_by_test_id("stopping-panel")).to_contain_text("Roll back to a checkpoint")
    docs_screenshot(page, "stopping-panel", element=page.get_by_test_id("stopping-panel"))
    dpo.refresh_from_db()
    assert dpo.result_checkpoint is not None

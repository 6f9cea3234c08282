"""The run pages' reads and views: grouping, headlines, filters, checkpoints with their step's
metrics, phase, samples, config, compare, and the stopping panel only on policy runs."""

from __future__ import annotations

import pytest
from django.urls import reverse

from monitoring.selectors import runs as selectors
from tests.helpers.clients import logged_in
from training import progress_services
from training.models import Checkpoint, TrainingRun


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("loss", "loss"), ("value_loss", "loss"), ("grad_norm", "loss"),
        ("learning_rate", "loss"), ("eval/loss", "evaluation"), ("eval/accuracy", "evaluation"),
        ("eval_reward_mean", "evaluation"), ("reward/score_mean", "rewards"),
        ("rewards/accuracy", "rewards"), ("accuracy", "rewards"), ("kl", "policy"),
        ("kl_coef", "policy"), ("clip_fraction", "policy"), ("entropy", "policy"),
        ("response_length", "policy"), ("eos_rate", "policy"), ("tokens_per_second", "throughput"),
        ("memory_fraction", "system"), ("something_new", "other"),
    ],
)  # fmt: skip
def test_each_metric_has_its_group(name, group):
    assert selectors.metric_group(name)[0] == group


def test_better_direction_of_headline_metrics():
    assert selectors.metric_direction("loss") == "min"
    assert selectors.metric_direction("eval/accuracy") == "max"
    assert selectors.metric_direction("rewards/margin") == "max"
    assert selectors.metric_direction("kl_coef") == ""


def test_shares_are_marked_so_their_axis_stops_at_one():
    meta = selectors.metric_meta(
        ["eval/accuracy", "eos_rate", "clip_fraction", "learning_rate", "kl"]
    )
    assert [name for name, m in meta.items() if m["unit_interval"]] == [
        "eval/accuracy", "eos_rate", "clip_fraction"
    ]  # fmt: skip


def test_groups_come_in_the_page_order_of_the_issue():
    assert [g["key"] for g in selectors.groups_order()] == [
        "loss", "rewards", "policy", "evaluation", "throughput", "system", "other",
    ]  # fmt: skip


def test_each_kind_shows_its_own_headline_in_the_runs_list(make_run, ml_engineer):
    """RM: eval accuracy (its last value, 0.75 at step 8); DPO: reward accuracy and margin;
    PPO: reward and KL; KTO: margin and its KL estimate; a metric not logged yet shows as a
    dash."""
    make_run(
        kind="rm", name="rm-run", metrics={4: {"eval/accuracy": 0.5}, 8: {"eval/accuracy": 0.75}}
    )
    make_run(
        kind="dpo", name="dpo-run", metrics={3: {"rewards/accuracy": 0.625, "rewards/margin": 1.5}}
    )
    make_run(kind="ppo", name="ppo-run", metrics={2: {"reward/score_mean": 0.2}})
    make_run(kind="kto", name="kto-run", metrics={5: {"rewards/margin": 0.25, "kl_estimate": 0.04}})
    rows = {row["run"].name: row["headline"] for row in selectors.runs_overview()}
    assert [(h["label"], h["value"]) for h in rows["rm-run"]] == [
        ("eval accuracy", 0.75),
        ("loss", None),
    ]
    assert [(h["label"], h["value"]) for h in rows["dpo-run"]] == [
        ("reward accuracy", 0.625), ("margin", 1.5)
    ]  # fmt: skip
    assert [(h["label"], h["value"]) for h in rows["ppo-run"]] == [("reward", 0.2), ("KL", None)]
    assert [(h["label"], h["value"]) for h in rows["kto-run"]] == [
        ("margin", 0.25), ("KL estimate", 0.04)
    ]  # fmt: skip
    page = logged_in(ml_engineer).get(reverse("monitoring:runs")).content.decode()
    assert (
        "eval accuracy 0.750" in page and "reward accuracy 0.625" in page and "margin 1.500" in page
    )


def test_the_runs_list_filters_by_kind_status_and_project(make_run, ml_engineer):
    make_run(kind="rm", name="first", status="succeeded")
    make_run(kind="dpo", name="second", status="running")
    client = logged_in(ml_engineer)
    url = reverse("monitoring:runs")
    assert "second" in client.get(url, {"kind": "dpo"}).content.decode()
    assert "first" not in client.get(url, {"kind": "dpo"}).content.decode()
    assert "first" in client.get(url, {"status": "succeeded"}).content.decode()
    assert "No run matches" in client.get(url, {"project": "nowhere"}).content.decode()
    bad = client.get(url, {"kind": "nonsense"}).content.decode()
    assert 'data-testid="filter-errors"' in bad and "first" in bad and "second" in bad


def test_checkpoints_show_the_metrics_of_their_step_and_the_result_mark(make_run, tmp_path):
    """Metrics logged at steps 2 and 4; checkpoints at 4 (exact) and 5 (nothing logged at 5: the
    last logged step before it, 4); the run's result is the one at step 4; each links to the round
    form with ?checkpoint=ID."""
    run = make_run(kind="ppo", metrics={2: {"loss": 1.0}, 4: {"loss": 0.5, "kl": 0.01}})
    for step in (4, 5):
        (tmp_path / f"step-{step}").mkdir()  # listed only while the folder exists
    at4 = Checkpoint.objects.create(run=run, step=4, path=str(tmp_path / "step-4"))
    Checkpoint.objects.create(run=run, step=5, path=str(tmp_path / "step-5"))
    TrainingRun.objects.filter(pk=run.pk).update(result_checkpoint=at4)
    run.refresh_from_db()
    rows = selectors.run_checkpoints(run, eval_round_url="/monitoring/eval/")
    assert [(r["step"], r["metrics_step"], r["result"]) for r in rows] == [
        (5, 4, False),
        (4, 4, True),
    ]
    assert rows[1]["metrics"] == {"loss": 0.5, "kl": 0.01}
    assert rows[1]["eval_url"] == f"/monitoring/eval/?checkpoint={at4.pk}"


def test_the_phase_reads_as_a_sentence(make_run, ml_engineer):
    """On the run's page, its metrics.json and the runs list."""
    run = make_run()
    progress_services.run_phase_record(run_id=run.pk, phase="reference log-probs", done=3, total=4)
    run.refresh_from_db()
    assert selectors.run_phase(run)["text"] == "reference log-probs, batch 3 of 4"
    client = logged_in(ml_engineer)
    assert (
        "reference log-probs, batch 3 of 4"
        in client.get(f"/monitoring/runs/{run.pk}/").content.decode()
    )
    assert "reference log-probs 3/4" in client.get(reverse("monitoring:runs")).content.decode()


def test_metrics_json_carries_phase_groups_checkpoints_and_new_samples(make_run, ml_engineer):
    run = make_run(kind="rloo", metrics={1: {"loss": 0.5, "kl": 0.0}})
    progress_services.samples_record(
        run_id=run.pk, step=1, samples=[{"prompt": "p", "response": "r", "reward": 0.1}]
    )
    progress_services.samples_record(
        run_id=run.pk, step=2, samples=[{"prompt": "p2", "response": "r2", "reward": 0.2}]
    )
    url = reverse("monitoring:run-metrics", args=[run.pk])
    data = logged_in(ml_engineer).get(url, {"samples_after": 1}).json()
    assert data["series"] == {"loss": [[1, 0.5]], "kl": [[1, 0.0]]}
    assert data["meta"]["kl"]["group"] == "policy"
    assert [s["step"] for s in data["samples"]] == [2]
    assert data["samples"][0]["samples"][0]["response"] == "r2"
    assert data["phase"] is None


def test_the_stopping_panel_appears_only_on_policy_runs(make_run, ml_engineer):
    client = logged_in(ml_engineer)
    rm = make_run(kind="rm")
    rloo = make_run(kind="rloo")
    assert (
        'data-testid="stopping-panel"'
        not in client.get(f"/monitoring/runs/{rm.pk}/").content.decode()
    )
    page = client.get(f"/monitoring/runs/{rloo.pk}/").content.decode()
    assert 'data-testid="stopping-panel"' in page and 'data-testid="samples"' in page
    assert 'data-testid="run-ended"' not in page


def test_a_finished_policy_run_says_it_has_ended_and_offers_only_a_roll_back(make_run, reviewer):
    run = make_run(kind="ppo", status="succeeded")
    page = logged_in(reviewer).get(f"/monitoring/runs/{run.pk}/").content.decode()
    assert 'data-testid="run-ended"' in page
    assert 'value="rollback"' in page and 'value="continue"' not in page


def test_the_run_page_lists_every_setting_of_its_recipe(make_run, ml_engineer):
    """A DPO run that sets beta: every DPOConfig field is a row, beta marked as set."""
    from training.recipes.config import DPOConfig, config_help

    run = make_run(kind="dpo", config={"beta": 0.3})
    rows = selectors.run_config_rows(run)
    assert [r["name"] for r in rows] == [name for name, _, _ in config_help(DPOConfig)]
    beta = next(r for r in rows if r["name"] == "beta")
    assert beta["value"] == 0.3 and beta["set"] is True
    page = logged_in(ml_engineer).get(f"/monitoring/runs/{run.pk}/").content.decode()
    assert 'data-setting="beta"' in page and 'data-testid="config"' in page


def test_the_config_shows_the_paths_concord_fills_in(make_run, ml_engineer, settings, tmp_path):
    """model, data and output_dir are not stored in the run's config (Concord fills them in when
    the run starts), so the page showed their empty defaults; it shows the values the worker
    passes: the base model's folder, the snapshot's pairs file, the run's folder, marked as set."""
    from pathlib import Path

    from common.model_registry import model_get

    settings.CONCORD_MODELS_DIR = tmp_path / "models"
    run = make_run(kind="dpo", output_dir=str(tmp_path / "runs" / "run-9"))
    rows = {r["name"]: r for r in selectors.run_config_rows(run)}
    pairs = str(Path(run.snapshot.export.folder) / "pairs.jsonl")
    model = str(model_get("smollm2-135m-instruct").path)
    assert model == str(tmp_path / "models" / "smollm2-135m-instruct")
    assert (rows["model"]["value"], rows["model"]["set"]) == (model, True)
    assert rows["data"]["value"] == pairs
    assert rows["output_dir"]["value"] == str(tmp_path / "runs" / "run-9")
    assert rows["output_dir"]["help"].endswith("(filled in by Concord from the run)")
    page = logged_in(ml_engineer).get(f"/monitoring/runs/{run.pk}/").content.decode()
    for value in (model, pairs, str(tmp_path / "runs" / "run-9")):
        assert f"<td>{value}</td>" in page


def test_compare_puts_differing_settings_first(make_run, ml_engineer):
    a = make_run(kind="dpo", name="a", config={"beta": 0.1})
    b = make_run(kind="dpo", name="b", config={"beta": 0.3})
    comparison = selectors.runs_compare(run_ids=[a.pk, b.pk])
    assert [r.pk for r in comparison["runs"]] == [a.pk, b.pk]
    differing = [row["name"] for row in comparison["config"] if row["differs"]]
    assert differing == ["beta"] and comparison["config"][0]["values"] == ["0.1", "0.3"]
    client = logged_in(ml_engineer)
    response = client.get(reverse("monitoring:runs-compare"), {"runs": [a.pk, b.pk]})
    assert response.status_code == 200 and 'data-setting="beta"' in response.content.decode()


@pytest.mark.parametrize(
    ("runs", "status", "message"),
    [(["x"], 400, "is not a run number"), ([], 200, "at least two"), (["1"], 200, "at least two")],
)
def test_compare_explains_bad_input(ml_engineer, runs, status, message):
    response = logged_in(ml_engineer).get(reverse("monitoring:runs-compare"), {"runs": runs})
    assert response.status_code == status and message in response.content.decode()


def test_a_grpo_run_page_groups_its_metrics_and_shows_the_stopping_panel(make_run, ml_engineer):
    """A GRPO run: its headline is the reward and the KL, each reward component charts with the
    rewards, the dynamic-sampling counts too, the clip fractions (low, high) with the policy and
    as shares; the page shows its samples and the stopping panel."""
    metrics = {"loss": 0.1, "kl": 0.02, "reward/score_mean": 0.4, "reward/exact_mean": 0.5,
               "dynamic/groups_dropped": 1.0, "clip_fraction_high": 0.1}  # fmt: skip
    run = make_run(kind="grpo", metrics={1: metrics})
    meta = selectors.metric_meta(metrics)
    assert (
        meta["reward/exact_mean"]["group"] == meta["dynamic/groups_dropped"]["group"] == "rewards"
    )
    assert meta["clip_fraction_high"]["group"] == "policy"
    assert meta["clip_fraction_high"]["unit_interval"] is True
    assert [label for *_, label in selectors.HEADLINES["grpo"]] == ["reward", "KL"]
    page = logged_in(ml_engineer).get(f"/monitoring/runs/{run.pk}/").content.decode()
    assert 'data-testid="stopping-panel"' in page and 'data-testid="samples"' in page

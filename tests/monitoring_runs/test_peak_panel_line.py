"""The stopping panel's peak line on a run: "estimated peak at KL x (interval), current KL y" from
the run's evaluated proxy reward against its logged KL, corrected by a gold scorer's points, with the
checkpoint nearest the estimate. Synthetic curve of known peak: proxy alpha 1.5, beta 0.5, r0 0.2
(peak at KL e^4 = 54.6), gold alpha 1, beta 0.5, r0 0.1 (peak at KL e^2 = 7.39)."""

import numpy as np
import pytest

from monitoring.selectors.stopping_panel import run_peak_line, run_stopping_panel
from monitoring.services.stopping_panel import stopping_panel_refresh
from monitoring.stats.peak import gao_curve
from tests.helpers.clients import logged_in
from training.models import Checkpoint

pytestmark = pytest.mark.django_db

KL = np.linspace(0.5, 15, 12)


def _run_with_curve(make_run):
    """Evaluations at steps 10..120 with KL 0.5..15; gold rated every third one; checkpoints at
    steps 30, 60 and 120 (KL 3.14, 7.09, 15)."""
    metrics = {}
    for i, kl in enumerate(KL):
        step = 10 * (i + 1)
        row = {"kl": float(kl), "eval_reward_mean": float(gao_curve(kl, 1.5, 0.5, 0.2))}
        if i % 3 == 0:
            row["gold_reward_mean"] = float(gao_curve(kl, 1.0, 0.5, 0.1))
        metrics[step] = row
    run = make_run(kind="rloo", metrics=metrics)
    for step in (30, 60, 120):
        Checkpoint.objects.create(run=run, step=step, path=f"checkpoints/step-{step}")
    return run


def test_the_gold_corrected_peak_and_the_checkpoint_nearest_it(make_run):
    """4 gold points correct the proxy's curve to gold's (offset and slope): peak at KL 7.39; the
    current KL is the last logged (15), past it; of the checkpoints the one at step 60 is nearest."""
    line = run_peak_line(_run_with_curve(make_run), rated_rounds=[], n_boot=200)
    assert line.estimate.n_proxy == 12 and line.estimate.n_gold == 4
    assert line.estimate.kl == pytest.approx(np.e**2, rel=1e-6)
    assert line.current_kl == 15.0 and line.checkpoint == "step 60"
    assert line.text.startswith("Estimated peak at KL 7.39 (90% interval")
    assert "current KL 15: past the peak; checkpoint nearest the peak: step 60" in line.text


def test_the_run_page_shows_the_peak_line(make_run, ml_engineer):
    """The stopping panel carries the line, and the run page shows it."""
    run = _run_with_curve(make_run)
    assert run_stopping_panel(run, n_boot=200)["peak"]["checkpoint"] == "step 60"
    stopping_panel_refresh(run=run)  # the page reads the stored figures
    page = logged_in(ml_engineer).get(f"/monitoring/runs/{run.pk}/").content.decode()
    assert 'data-testid="peak-estimate"' in page and "Estimated peak at KL 7.39" in page


def test_a_run_without_evaluations_says_too_few(make_run):
    line = run_peak_line(make_run(kind="ppo", metrics={1: {"kl": 0.1}}), rated_rounds=[])
    assert line.estimate.reason == "too_few_points" and "current KL 0.1" in line.text
    assert line.text.startswith("Peak not yet determined: too few evaluations")


def test_a_checkpoint_whose_sampled_kl_dipped_below_zero_is_read_as_zero(make_run):
    """A sampled KL estimate can be slightly negative (and NaN on a step without samples): the
    panel reads KL 0 (KL is >= 0) and leaves a NaN checkpoint out, instead of failing (the gold
    farm's 36-step RLOO run stopped here)."""
    run = _run_with_curve(make_run)
    Checkpoint.objects.create(run=run, step=5, path="checkpoints/step-5", metrics={"kl": -0.02})
    Checkpoint.objects.create(run=run, step=7, path="checkpoints/step-7", metrics={"kl": "nan"})
    line = run_peak_line(run, rated_rounds=[], n_boot=200)
    assert line.checkpoint == "step 60"
    assert run_stopping_panel(run, n_boot=200)["peak"]["checkpoint"] == "step 60"


def test_a_run_still_rising_names_no_checkpoint(make_run, ml_engineer):
    """Proxy 0.4 d (no turn) at KL 0.5..15 with checkpoints: the stored peak is not determined
    (still rising), names no checkpoint, and the page says so with the largest KL evaluated."""
    metrics = {
        10 * (i + 1): {"kl": float(kl), "eval_reward_mean": 0.4 * float(np.sqrt(kl))}
        for i, kl in enumerate(KL)
    }
    run = make_run(kind="rloo", metrics=metrics)
    Checkpoint.objects.create(run=run, step=60, path="checkpoints/step-60")
    peak = run_stopping_panel(run, n_boot=200)["peak"]
    assert peak["status"] == "not_determined" and peak["reason"] == "still_rising"
    assert peak["checkpoint"] is None
    stopping_panel_refresh(run=run)
    page = logged_in(ml_engineer).get(f"/monitoring/runs/{run.pk}/").content.decode()
    assert "Peak not yet determined: reward still rising at KL 15 (the largest evaluated)" in page


def test_the_evaluation_kl_is_the_axis_when_the_run_logs_it(make_run):
    """The same curve with its KL logged as eval_kl, and a training-batch kl that jumps (the
    curve's KL times 0.2, 3, 0.5, ... by turns): the line reads eval_kl, so the peak and the
    checkpoint are those of the clean curve, and the current KL is the last eval_kl (15)."""
    jumps = np.array([0.2, 3.0, 0.5, 2.5])[np.arange(len(KL)) % 4]
    metrics = {}
    for i, kl in enumerate(KL):
        row = {"kl": float(kl * jumps[i]), "eval_kl": float(kl),
               "eval_reward_mean": float(gao_curve(kl, 1.5, 0.5, 0.2))}  # fmt: skip
        if i % 3 == 0:
            row["gold_reward_mean"] = float(gao_curve(kl, 1.0, 0.5, 0.1))
        metrics[10 * (i + 1)] = row
    run = make_run(kind="rloo", metrics=metrics)
    for step in (30, 60, 120):
        Checkpoint.objects.create(run=run, step=step, path=f"checkpoints/step-{step}")
    line = run_peak_line(run, rated_rounds=[], n_boot=200)
    assert line.estimate.kl == pytest.approx(np.e**2, rel=1e-6)
    assert line.current_kl == 15.0 and line.checkpoint == "step 60"

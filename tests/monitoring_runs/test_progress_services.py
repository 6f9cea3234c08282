"""The worker's callback stores the phase before the first step and the samples of evaluation steps."""

from __future__ import annotations

import pytest

from common.lifecycle import JobHeartbeat
from training import progress_services
from training.models import RunSample, TrainingRun
from training.worker import _database_callback


def test_samples_are_stored_in_order_and_a_repeated_step_replaces_them(make_run):
    """Two samples at step 4, then (after a resume) one at step 4 again: only the newer one stays;
    numeric extras become figures, text and None reward are kept as given."""
    run = make_run(kind="rloo")
    stored = progress_services.samples_record(
        run_id=run.pk,
        step=4,
        samples=[
            {"prompt": "p1", "response": "r1", "reward": 0.5, "kl": 0.01, "note": "text"},
            {"prompt": "p2", "response": "r2", "reward": None, "score": float("nan")},
        ],
    )
    assert stored == 2
    rows = list(
        RunSample.objects.filter(run=run).values_list("position", "prompt", "reward", "figures")
    )
    assert rows == [(0, "p1", 0.5, {"kl": 0.01}), (1, "p2", None, {})]
    progress_services.samples_record(
        run_id=run.pk, step=4, samples=[{"prompt": "p3", "response": "r3"}]
    )
    assert list(RunSample.objects.filter(run=run).values_list("prompt", flat=True)) == ["p3"]


def test_a_sampled_nul_character_is_stored_as_a_replacement_character(make_run):
    """A model can sample the token for byte 0; PostgreSQL text cannot hold NUL, and the run
    failed there. It is stored as U+FFFD and the run goes on."""
    run = make_run(kind="rloo")
    progress_services.samples_record(
        run_id=run.pk, step=5, samples=[{"prompt": "p\x00", "response": "a\x00b", "reward": 1.0}]
    )
    sample = RunSample.objects.get(run=run)
    assert (sample.prompt, sample.response) == ("p\ufffd", "a\ufffdb")


def test_a_sample_without_text_is_refused_and_nothing_is_written(make_run):
    run = make_run(kind="ppo")
    with pytest.raises(ValueError, match=r"samples\[1\]"):
        progress_services.samples_record(
            run_id=run.pk, step=1, samples=[{"prompt": "p", "response": "r"}, {"prompt": "p"}]
        )
    assert not RunSample.objects.filter(run=run).exists()


def test_the_callback_records_the_phase_until_the_first_step(make_run):
    """on_phase writes the phase (first and last batch at least); on_step clears it."""
    run = make_run(kind="dpo")
    callback = _database_callback(run.pk, JobHeartbeat(model=TrainingRun, pk=run.pk, every_s=10.0))
    callback.on_start(total_steps=8, config={})
    callback.on_phase(phase="reference log-probs", done=1, total=4)
    run.refresh_from_db()
    assert (run.phase, run.phase_done, run.phase_total) == ("reference log-probs", 1, 4)
    callback.on_phase(phase="reference log-probs", done=4, total=4)  # the last one always lands
    run.refresh_from_db()
    assert run.phase_done == 4
    callback.on_step(step=1, total_steps=8)
    run.refresh_from_db()
    assert (run.phase, run.step) == ("", 1)


def test_the_callback_stores_samples(make_run):
    run = make_run(kind="rloo")
    callback = _database_callback(run.pk, JobHeartbeat(model=TrainingRun, pk=run.pk, every_s=10.0))
    callback.on_samples(step=2, samples=[{"prompt": "p", "response": "r", "reward": 1.0}])
    assert RunSample.objects.get(run=run).step == 2


def test_a_phase_needs_a_name_and_counts_not_below_zero(make_run):
    run = make_run()
    with pytest.raises(ValueError, match="phase"):
        progress_services.run_phase_record(run_id=run.pk, phase=" ", done=0, total=0)
    with pytest.raises(ValueError, match="negative"):
        progress_services.run_phase_record(run_id=run.pk, phase="x", done=-1, total=0)

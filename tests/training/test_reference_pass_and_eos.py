"""Issue 22, the other two symptoms: DPO's reference pass covers only the pairs the run trains on
(with a progress phase, and a later run computing only the rest); and most samples missing EOS
under the missing-EOS penalty raises an alert, with a start-up warning when the budget is obviously
too small for the data's answers."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes import DPOConfig, RLOOConfig, TrainingCallback
from training.recipes.dpo import ReferenceLogps, train_dpo


class Phases(TrainingCallback):
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def on_phase(self, *, phase: str, done: int, total: int) -> None:
        self.calls.append((phase, done, total))


def _dpo(model, data, output, cache, **overrides) -> DPOConfig:
    values = {
        "model": str(model),
        "data": str(data),
        "output_dir": str(output),
        "batch_size": 2,
        "max_length": 128,
        "checkpoint_every": 0,
        "device": "cpu",
        "reference_cache_dir": str(cache),
    }
    return DPOConfig(**{**values, **overrides})


def test_reference_pass_covers_only_the_steps_run_and_a_longer_run_computes_the_rest(
    tiny_llama_dir, pairs_file, tmp_path
):
    """8 pairs in batches of 2, an explicit reference model (so step 1 is not filled from the
    policy's forward). max_steps 2: 4 pairs computed (not all 8, as before issue 22), one phase call
    per batch after a 0-of-2 start. Then max_steps 3: the cache's 4 reused, 2 more computed. Then
    max_steps 3 again: nothing computed, a cache hit."""
    cache = tmp_path / "cache"
    ref = str(tiny_llama_dir)
    phases = Phases()
    first = train_dpo(
        _dpo(tiny_llama_dir, pairs_file, tmp_path / "a", cache, max_steps=2, ref_model=ref),
        phases,
    )
    assert first.summary["reference_pairs_computed"] == 4
    assert first.summary["reference_pairs_cached"] == 0
    assert phases.calls == [("reference log-probs", d, 2) for d in (0, 1, 2)]
    (cache_file,) = cache.glob("*.pt")
    assert int(ReferenceLogps.load(cache_file, 8).known.sum()) == 4

    second = train_dpo(
        _dpo(tiny_llama_dir, pairs_file, tmp_path / "b", cache, max_steps=3, ref_model=ref)
    )
    assert second.summary["reference_pairs_cached"] == 4
    assert second.summary["reference_pairs_computed"] == 2
    assert not second.summary["reference_cache_hit"]
    third = train_dpo(
        _dpo(tiny_llama_dir, pairs_file, tmp_path / "c", cache, max_steps=3, ref_model=ref)
    )
    assert third.summary["reference_pairs_computed"] == 0 and third.summary["reference_cache_hit"]


def test_one_step_from_the_starting_policy_needs_no_reference_pass(
    tiny_llama_dir, pairs_file, tmp_path
):
    """max_steps 1 with the default reference (the starting policy): step 1's own forward gives its
    two pairs' reference values, so no batch runs before the first step at all."""
    phases = Phases()
    result = train_dpo(
        _dpo(tiny_llama_dir, pairs_file, tmp_path / "run", tmp_path / "cache", max_steps=1), phases
    )
    assert phases.calls == []
    assert result.summary["reference_pairs_computed"] == 2


def test_train_prints_the_reference_pass_progress(tiny_llama_dir, pairs_file, tmp_path, settings):
    """The CLI says what it does before the first step: 'reference log-probs: batch N of M' lines
    on stderr (stdout stays JSON lines)."""
    settings.VAR_DIR = tmp_path / "var"
    out, err = StringIO(), StringIO()
    call_command(
        "train",
        *("--kind", "dpo", "--data", str(pairs_file), "--model", str(tiny_llama_dir)),
        *("--ref-model", str(tiny_llama_dir), "--output", str(tmp_path / "run")),
        *("--batch-size", "2", "--max-steps", "2", "--max-length", "128", "--set", "device=cpu"),
        stdout=out,
        stderr=err,
    )
    assert "reference log-probs: batch 0 of 2" in err.getvalue()
    assert "reference log-probs: batch 2 of 2" in err.getvalue()
    assert all(json.loads(line) for line in out.getvalue().splitlines())


def _rloo(policy, reward, data, output, **overrides) -> RLOOConfig:
    values = {
        "model": str(policy),
        "reward_model": str(reward),
        "data": str(data),
        "output_dir": str(output),
        "batch_size": 2,
        "rloo_k": 2,
        "max_new_tokens": 2,
        "max_length": 128,
        "eval_prompts": 0,
        "checkpoint_every": 0,
        "device": "cpu",
        "max_steps": 1,
    }
    return RLOOConfig(**{**values, **overrides})


@pytest.mark.parametrize("penalty", [1.0, 0.0])
def test_the_share_of_samples_the_missing_eos_penalty_hits_is_logged(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path, penalty
):
    """Two new tokens from an untrained tiny model: (almost) no sample ends with EOS. With the
    penalty on, missing_eos_penalised = 1 - eos_rate; with it off, 0 (nothing was penalised)."""
    from training.recipes.rloo import train_rloo

    train_rloo(
        _rloo(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path, missing_eos_penalty=penalty)
    )
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    expected = 1 - row["eos_rate"] if penalty else 0.0
    assert row["missing_eos_penalised"] == pytest.approx(expected)


@pytest.mark.django_db
def test_most_samples_without_eos_open_an_alert_with_its_diagnosis(tmp_path, settings):
    """The rule in settings: missing_eos_penalised above 0.5 opens an alert whose diagnosis says to
    raise max_new_tokens or lower the penalty; back under, it resolves."""
    from annotation.services.exporting import dataset_export
    from annotation.services.importing import comparisons_import, project_get_or_create
    from monitoring.alerts import evaluate_metrics
    from monitoring.models import Alert
    from training import services

    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    project, _ = project_get_or_create(slug="eos")
    rows = [{"prompt": p, "response_a": c, "response_b": r, "gold": "a"} for p, c, r in PAIRS]
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    snapshot = services.snapshot_for(export=dataset_export(project=project))
    run = services.run_create(
        name="eos", kind="dpo", base_model="smollm2-135m-instruct", snapshot=snapshot,
        config={}, created_by=None,
    )  # fmt: skip
    (alert,) = evaluate_metrics(run_id=run.pk, step=1, metrics={"missing_eos_penalised": 0.9})
    assert (alert.threshold, alert.direction) == (0.5, ">")
    assert "max_new_tokens" in alert.diagnosis and "missing_eos_penalty" in alert.diagnosis
    evaluate_metrics(run_id=run.pk, step=2, metrics={"missing_eos_penalised": 0.1})
    assert Alert.objects.get(run=run).resolved_at is not None


def test_eos_budget_warning_when_most_reference_answers_are_longer():
    """Answers of 10, 40, 50, 60 tokens against max_new_tokens 32: 3 of 4 longer -> a warning with
    the median (50) and a budget fitting 90% rounded up to 32s (64); the penalty off -> none; a
    budget of 64 -> none (1 of 4 longer)."""
    from training.recipes.online import eos_budget_warning

    config = _rloo("m", "r", "d", "o", max_new_tokens=32)
    warning = eos_budget_warning(config, [10, 40, 50, 60])
    assert "75%" in warning and "median 50" in warning and "max_new_tokens=64" in warning
    config.missing_eos_penalty = 0.0
    assert eos_budget_warning(config, [10, 40, 50, 60]) is None
    assert (
        eos_budget_warning(_rloo("m", "r", "d", "o", max_new_tokens=64), [10, 40, 50, 60]) is None
    )


def test_train_warns_at_start_up_when_max_new_tokens_is_too_small_for_the_data(
    tiny_llama_dir, tiny_reward_dir, tmp_path, settings
):
    """An export's rows carry the answers: when most are longer than max_new_tokens, the train
    command says so before training (stderr), and still runs."""
    settings.VAR_DIR = tmp_path / "var"
    data = write_jsonl(
        tmp_path / "pairs.jsonl",
        [{"prompt": p, "chosen": c * 3, "rejected": r * 3} for p, c, r in PAIRS],
    )
    out, err = StringIO(), StringIO()
    call_command(
        "train",
        *("--kind", "rloo", "--data", str(data), "--model", str(tiny_llama_dir)),
        *("--reward-model", str(tiny_reward_dir), "--output", str(tmp_path / "run")),
        *("--batch-size", "2", "--max-steps", "1", "--max-length", "128"),
        *("--set", "device=cpu", "--set", "max_new_tokens=2", "--set", "eval_prompts=0"),
        stdout=out,
        stderr=err,
    )
    assert "warning: max_new_tokens=2" in err.getvalue()
    assert json.loads(out.getvalue().splitlines()[-1])["status"] == "completed"

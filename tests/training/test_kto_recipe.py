"""KTO recipe on the tiny Llama: the first step's loss where the policy is its own reference (every
example's loss is its weight / 2, the KL estimate 0), the loss falls, a cancelled run resumes to the
same weights, the reference pass is cached, the KL estimate is the mean mismatched log-ratio, and
bad unpaired files are refused with their line."""

import json

import pytest
import torch

from tests.helpers.recipes import StopAfter, tiny_pair_values
from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes import KTOConfig, run_training
from training.recipes.config import ConfigError
from training.recipes.data import DataError, EpochSampler
from training.recipes.kinds import config_from_dict
from training.recipes.kto_data import load_kto_examples, mismatched_keys


def _config(tiny_llama_dir, data_file, output_dir, **overrides) -> KTOConfig:
    return KTOConfig(**tiny_pair_values(tiny_llama_dir, data_file, output_dir, **overrides))


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def _unpaired_rows(n_desirable: int, n_undesirable: int) -> list[dict]:
    good = [{"prompt": p, "completion": c, "label": True} for p, c, _ in PAIRS]
    bad = [{"prompt": p, "completion": r, "label": False} for p, _, r in PAIRS]
    return good[:n_desirable] + bad[:n_undesirable]


def test_defaults_and_refusals():
    """Defaults (beta 0.1, weights balanced from the data, the pairs of ``data``); impossible
    values are refused naming their field; the config round-trips through its dict."""
    common = {"model": "m", "data": "d.jsonl", "output_dir": "o"}
    config = KTOConfig(**common)
    assert (config.kind, config.beta, config.desirable_weight, config.undesirable_weight) == (
        "kto", 0.1, None, None,
    )  # fmt: skip
    assert config.unpaired_data is None and config_from_dict(config.to_dict()) == config
    for values, field in [
        ({"beta": 0.0}, "beta"),
        ({"desirable_weight": 0.0, "undesirable_weight": 1.0}, "desirable_weight"),
        ({"desirable_weight": 1.0}, "undesirable_weight"),
        ({"undesirable_weight": 1.0}, "desirable_weight"),
        ({"batch_size": 1}, "batch_size"),
    ]:
        with pytest.raises(ConfigError) as error:
            KTOConfig(**common, **values)
        assert error.value.field == field


def test_pairs_split_into_one_desirable_and_one_undesirable_example(pairs_file, tmp_path):
    """Each pair gives its chosen (desirable) then its rejected (undesirable) answer, same prompt."""
    examples = load_kto_examples(KTOConfig(model="m", data=str(pairs_file), output_dir="o"))
    assert len(examples) == 2 * len(PAIRS)
    prompt, chosen, rejected = PAIRS[0]
    assert examples[0].prompt == examples[1].prompt == (("user", prompt),)
    assert (examples[0].completion, examples[0].desirable) == (chosen, True)
    assert (examples[1].completion, examples[1].desirable) == (rejected, False)


def test_mismatched_pairs_shift_the_batch_by_one():
    """Each example's prompt with the completion of the example before it; the first takes the
    last's; a batch of one borrows the completion before it in the epoch's order."""
    sampler = EpochSampler(5, 2, seed=0)
    batch = sampler.batch(0, 0)
    assert mismatched_keys(sampler, 0, 0) == [(batch[0], batch[1]), (batch[1], batch[0])]
    last = sampler.batch(0, 2)
    assert len(last) == 1
    assert mismatched_keys(sampler, 0, 2) == [(last[0], sampler.batch(0, 1)[-1])]


@pytest.mark.parametrize(
    ("counts", "weights", "expected"),
    [
        # split pairs: 8 + 8, balanced weights 1 / 1: every loss 1/2
        (None, {}, 0.5),
        # explicit weights 2 / 1 on 8 + 8: (8 * 2/2 + 8 * 1/2) / 16
        (None, {"desirable_weight": 2.0, "undesirable_weight": 1.0}, 0.75),
        # 6 desirable + 2 undesirable balanced: lambda_U = 3, (6 * 1/2 + 2 * 3/2) / 8
        ((6, 2), {}, 0.75),
    ],
)
def test_first_step_loss_is_half_the_weights(
    counts, weights, expected, tiny_llama_dir, pairs_file, tmp_path
):
    """Step 1, the policy is its own reference: log pi - log pi_ref = 0 and the KL estimate is 0,
    so each example's loss is lambda * (1 - sigmoid(0)) = lambda / 2; one batch holds every
    example, so the step's loss is the mean of lambda / 2 over the data."""
    data, extra = pairs_file, {}
    if counts is not None:
        data = write_jsonl(tmp_path / "unpaired.jsonl", _unpaired_rows(*counts))
        extra = {"unpaired_data": str(data)}
    n = sum(counts) if counts else 2 * len(PAIRS)
    out = tmp_path / "run"
    config = _config(tiny_llama_dir, data, out, max_steps=1, batch_size=n, **weights, **extra)
    result = run_training(config)
    first = _metrics(out)[0]
    assert first["loss"] == pytest.approx(expected, rel=1e-6)
    assert first["kl_estimate"] == 0.0
    assert first["rewards/desirable"] == first["rewards/undesirable"] == 0.0
    assert result.summary["examples_trained"] == n
    if counts == (6, 2):
        assert (result.summary["desirable_weight"], result.summary["undesirable_weight"]) == (
            1.0, 3.0,
        )  # fmt: skip


def test_training_lowers_the_loss(tiny_llama_dir, pairs_file, tmp_path):
    """Twenty steps at a high learning rate on 16 examples lower the loss and separate the rewards;
    the KL estimate moves off 0 after step 1; the run folder holds the summary and final model."""
    out = tmp_path / "run"
    result = run_training(_config(tiny_llama_dir, pairs_file, out, epochs=5, beta=0.5))
    metrics = _metrics(out)
    assert result.status == "completed" and result.steps == 20
    assert metrics[-1]["loss"] < metrics[0]["loss"] - 0.05
    assert metrics[-1]["rewards/margin"] > metrics[0]["rewards/margin"] + 0.1
    assert any(row["kl_estimate"] != 0.0 for row in metrics[1:])
    assert metrics[0]["examples_per_second"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "kto" and summary["examples_trained"] == 80
    assert (summary["desirable_examples"], summary["undesirable_examples"]) == (8, 8)
    assert (out / "final" / "model.safetensors").is_file()


def test_cancel_then_resume_continues_exactly(tiny_llama_dir, pairs_file, tmp_path):
    """6 steps in one go, or cancelled after step 2 and resumed: identical final weights and the
    same losses and KL estimates at every step."""
    from safetensors.torch import load_file

    straight_dir = tmp_path / "straight"
    values = {"max_steps": 6, "batch_size": 3, "checkpoint_every": 0}
    straight = run_training(_config(tiny_llama_dir, pairs_file, straight_dir, **values))
    out = tmp_path / "interrupted"
    config = _config(tiny_llama_dir, pairs_file, out, **values)
    cancelled = run_training(config, [StopAfter(2)])
    assert cancelled.status == "cancelled" and cancelled.steps == 2
    resumed = run_training(config)
    assert resumed.status == "completed" and resumed.steps == 6

    a = load_file(f"{straight.final_model_dir}/model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    rows, expected = _metrics(out), _metrics(straight_dir)
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]
    for key in ("loss", "kl_estimate", "rewards/margin"):
        assert [row[key] for row in rows] == [row[key] for row in expected], key


def test_a_second_run_reads_the_reference_from_the_cache(tiny_llama_dir, pairs_file, tmp_path):
    """The same data, model and steps with a shared cache folder: the second run computes no
    reference log-probs, and trains the same losses."""
    cache = tmp_path / "cache"
    values = {"max_steps": 3, "reference_cache_dir": str(cache), "resume": False}
    first = run_training(_config(tiny_llama_dir, pairs_file, tmp_path / "a", **values))
    second = run_training(_config(tiny_llama_dir, pairs_file, tmp_path / "b", **values))
    assert first.summary["reference_computed"] > 0
    assert second.summary["reference_computed"] == 0
    assert [r["loss"] for r in _metrics(tmp_path / "a")] == [
        r["loss"] for r in _metrics(tmp_path / "b")
    ]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"prompt": "p", "completion": "c", "label": "yes"}'], "line 1: 'label' must be true"),
        (['{"prompt": "p", "completion": "c", "label": true}', '{"prompt": "p", "label": true}'],
         "line 2: 'completion' is missing"),
        (['{"prompt": "p", "completion": "c", "label": true}', "not json"], "line 2: not JSON"),
        (['{"prompt": "", "completion": "c", "label": true}'], "line 1: 'prompt' is empty"),
        (['{"prompt": "p", "completion": "c", "chosen": "x", "label": true}'], "line 1: has both"),
        ([], "no rows"),
        (['{"prompt": "p", "completion": "c", "label": true}'] * 3, "0 undesirable"),
    ],
)  # fmt: skip
def test_bad_unpaired_files_are_refused_naming_the_line(lines, message, tiny_llama_dir, tmp_path):
    """A bad row stops the run before anything is trained, naming the file's line and the field;
    a file of one kind only cannot be balanced."""
    path = tmp_path / "unpaired.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    config = _config(tiny_llama_dir, path, tmp_path / "run", unpaired_data=str(path))
    with pytest.raises(DataError, match=message):
        run_training(config)
    assert not (tmp_path / "run" / "final").exists()


def test_conversational_unpaired_rows_keep_their_turns(tiny_llama_dir, tmp_path):
    """TRL's conversational format: a prompt of several messages and a one-message completion (or
    chosen/rejected) read as those turns and that text, mixed with plain rows; a message without
    content is refused naming the line."""
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
             {"role": "user", "content": "and now?"}]  # fmt: skip
    rows = [
        {"prompt": turns, "completion": [{"role": "assistant", "content": "now"}], "label": True},
        {"prompt": turns, "chosen": [{"role": "assistant", "content": "yes"}], "rejected": "no"},
        {"prompt": "plain", "completion": "text", "label": False},
    ]
    path = write_jsonl(tmp_path / "unpaired.jsonl", rows)
    examples = load_kto_examples(_config(tiny_llama_dir, path, tmp_path, unpaired_data=str(path)))
    conversation = tuple((m["role"], m["content"]) for m in turns)
    assert [(e.prompt, e.completion, e.desirable) for e in examples] == [
        (conversation, "now", True),
        (conversation, "yes", True),
        (conversation, "no", False),
        ((("user", "plain"),), "text", False),
    ]
    path.write_text(json.dumps({"prompt": [{"role": "user"}], "completion": "c", "label": True}))
    with pytest.raises(DataError, match=r"unpaired\.jsonl line 1: prompt must be"):
        load_kto_examples(_config(tiny_llama_dir, path, tmp_path, unpaired_data=str(path)))


def test_a_missing_unpaired_file_is_named(tiny_llama_dir, pairs_file, tmp_path):
    config = _config(
        tiny_llama_dir, pairs_file, tmp_path / "run", unpaired_data=str(tmp_path / "no.jsonl")
    )
    with pytest.raises(DataError, match="unpaired_data: no such file"):
        run_training(config)


def test_the_kl_estimate_is_the_mean_mismatched_log_ratio(tiny_llama_dir, pairs_file, tmp_path):
    """Step 2's logged kl_estimate, recomputed by hand: the policy after step 1 (its checkpoint)
    and the starting model score step 2's mismatched sequences (each prompt with the previous
    example's completion); the estimate is the mean of their differences."""
    from training.recipes.kto_data import fit_kto_examples
    from training.recipes.models import load_causal_lm, load_tokenizer
    from training.recipes.pair_policy import forward_sequences

    out = tmp_path / "run"
    config = _config(tiny_llama_dir, pairs_file, out, max_steps=2, checkpoint_every=1, beta=0.5)
    run_training(config)
    logged = _metrics(out)[1]["kl_estimate"]

    tokenizer = load_tokenizer(config.model)
    data = fit_kto_examples(config, tokenizer)
    sampler = EpochSampler(len(data), config.batch_size, config.seed)
    sequences = [data.mismatched(key) for key in mismatched_keys(sampler, 0, 1)]
    device = torch.device("cpu")

    def scores(path):
        model, packed = load_causal_lm(path, device=device, trainable=False)
        with torch.no_grad():
            totals, _, _ = forward_sequences(
                model, sequences, packed=packed, pad_token_id=tokenizer.pad_token_id, device=device
            )
        return totals

    after_step_1 = scores(out / "checkpoints" / "step-00000001")
    reference = scores(tiny_llama_dir)
    assert logged != 0.0
    assert logged == pytest.approx(float((after_step_1 - reference).mean()), abs=1e-5)

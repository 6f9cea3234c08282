"""The reward-model recipe on a tiny decoder (packed, last token) and a tiny encoder (unpadded, [CLS])."""

import json

import pytest
import torch

from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes import RewardModelConfig
from training.recipes.data import load_preference_pairs
from training.recipes.models import load_tokenizer
from training.recipes.reward_model import train_reward_model
from training.recipes.scoring import RewardScorer


def _config(model_dir, pairs_file, output_dir, **overrides) -> RewardModelConfig:
    values = {
        "model": str(model_dir),
        "data": str(pairs_file),
        "output_dir": str(output_dir),
        "batch_size": 3,
        "epochs": 8,
        "max_length": 64,
        "learning_rate": 3e-3,
        "eval_fraction": 0.25,
        "checkpoint_every": 0,
        "device": "cpu",
    }
    values.update(overrides)
    return RewardModelConfig(**values)


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("model_fixture", "learning_rate"), [("tiny_llama_dir", 3e-3), ("tiny_bert_dir", 1e-2)]
)
def test_reward_model_learns_and_reports_held_out_numbers(
    model_fixture, learning_rate, pairs_file, tmp_path, request
):
    """6 train pairs, 2 held out. The training loss falls from near ln 2; the summary holds held-out
    accuracy and reward mean/std; the saved folder loads with AutoModelForSequenceClassification."""
    from transformers import AutoModelForSequenceClassification

    model_dir = request.getfixturevalue(model_fixture)
    result = train_reward_model(
        _config(model_dir, pairs_file, tmp_path, learning_rate=learning_rate)
    )
    train_rows = [row for row in _metrics(tmp_path) if "loss" in row]
    assert train_rows[0]["loss"] == pytest.approx(0.693, abs=0.05)
    assert train_rows[-1]["loss"] < train_rows[0]["loss"] - 0.1
    summary = result.summary
    assert summary["train_pairs"] == 6 and summary["eval_pairs"] == 2
    assert 0.0 <= summary["eval/accuracy"] <= 1.0
    assert summary["eval/reward_std"] >= 0.0
    assert json.loads((tmp_path / "final" / "reward_stats.json").read_text())["eval/pairs"] == 2
    loaded = AutoModelForSequenceClassification.from_pretrained(result.final_model_dir)
    assert loaded.config.num_labels == 1


def test_packed_rewards_equal_what_transformers_computes_on_the_saved_model(
    tiny_llama_dir, pairs_file, tmp_path
):
    """The recipe's packed last-token reward equals the saved model's own padded forward on the chat
    rendering: users score with plain transformers and get the numbers training optimised."""
    from transformers import AutoModelForSequenceClassification

    result = train_reward_model(_config(tiny_llama_dir, pairs_file, tmp_path, epochs=1))
    tokenizer = load_tokenizer(result.final_model_dir)
    pairs = load_preference_pairs(pairs_file)[:3]
    texts = [
        tokenizer.apply_chat_template(
            [
                {"role": "user", "content": p.prompt[0][1]},
                {"role": "assistant", "content": p.chosen},
            ],
            tokenize=False,
        )
        for p in pairs
    ]
    plain = AutoModelForSequenceClassification.from_pretrained(result.final_model_dir).eval()
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        expected = plain(**batch).logits[:, 0]

    from training.recipes.scoring import load_sequence_classifier

    model = load_sequence_classifier(
        result.final_model_dir, device=torch.device("cpu"), tokenizer=tokenizer
    ).eval()
    scorer = RewardScorer(model, tokenizer, max_length=256, prompt_budget=128)
    assert scorer.packed
    with torch.no_grad():
        got = scorer.score([scorer.encode(p.prompt, p.chosen) for p in pairs])
    assert torch.allclose(got, expected, atol=1e-5)


def test_encoder_reward_model_trains_unpadded_and_scores_like_plain_transformers(
    tiny_bert_dir, pairs_file, tmp_path
):
    """Trained unpadded, the saved encoder scores (prompt, response) with plain transformers exactly
    as the recipe scored it."""
    from transformers import AutoModelForSequenceClassification

    result = train_reward_model(_config(tiny_bert_dir, pairs_file, tmp_path, epochs=2))
    assert result.summary["packed"] is True
    tokenizer = load_tokenizer(result.final_model_dir)
    pairs = load_preference_pairs(pairs_file)[:3]
    plain = AutoModelForSequenceClassification.from_pretrained(result.final_model_dir).eval()
    batch = tokenizer(
        [p.prompt[0][1] for p in pairs],
        [p.chosen for p in pairs],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        expected = plain(**batch).logits[:, 0]

    from training.recipes.scoring import load_sequence_classifier

    model = load_sequence_classifier(
        result.final_model_dir, device=torch.device("cpu"), tokenizer=tokenizer
    ).eval()
    scorer = RewardScorer(model, tokenizer, max_length=64, prompt_budget=32)
    assert scorer.encoder_packed and not scorer.packed
    with torch.no_grad():
        got = scorer.score([scorer.encode(p.prompt, p.chosen) for p in pairs])
    assert torch.allclose(got, expected, atol=1e-5)


def test_margin_and_centering_options_run(tiny_llama_dir, tmp_path):
    """Rows with a 'margin' field train with use_margin and reward centering switched on."""

    rows = [{"prompt": p, "chosen": c, "rejected": r, "margin": 0.5} for p, c, r in PAIRS]
    data = write_jsonl(tmp_path / "margins.jsonl", rows)
    result = train_reward_model(
        _config(
            tiny_llama_dir,
            data,
            tmp_path / "run",
            epochs=1,
            use_margin=True,
            center_rewards_coef=0.01,
        )
    )
    assert result.status == "completed"


def test_annotator_aware_model_learns_a_side_bias_and_reports_the_plain_accuracy(
    tiny_llama_dir, tmp_path
):
    """32 import-format rows (the 8 pairs 4 times) with three annotators: 'careful' votes for the
    gold response, 'lefty' for whichever was shown on the left, 'noisy' at random. The bias head
    learns a left pull for lefty (not for careful), and the summary holds the plain model's held-out
    accuracy beside its own."""
    import random

    rng = random.Random(0)
    rows = []
    for prompt, chosen, rejected in PAIRS * 4:
        judgements = []
        for annotator in ("careful", "lefty", "noisy"):
            shown_left = rng.choice("ab")
            choice = {"careful": "a", "lefty": shown_left, "noisy": rng.choice("ab")}[annotator]
            judgements.append({"annotator": annotator, "choice": choice, "shown_left": shown_left})
        rows.append(
            {
                "prompt": prompt,
                "response_a": chosen,
                "response_b": rejected,
                "gold": "a",
                "judgements": judgements,
            }
        )
    data = write_jsonl(tmp_path / "judged.jsonl", rows)
    result = train_reward_model(
        _config(
            tiny_llama_dir,
            data,
            tmp_path / "run",
            annotator_aware=True,
            epochs=3,
            batch_size=8,
            annotator_head_learning_rate=5e-2,
            lr_scheduler="constant",
        )
    )
    annotators = result.summary["annotators"]
    assert set(annotators) == {"careful", "lefty", "noisy", "(consensus)"}
    assert annotators["lefty"]["left_bias"] > 0.1
    assert abs(annotators["careful"]["left_bias"]) < annotators["lefty"]["left_bias"] / 2
    assert result.summary["plain/eval/accuracy"] is not None
    assert 0.0 <= result.summary["eval/accuracy"] <= 1.0


def test_cluster_conditioning_learns_a_preference_that_flips_by_domain(tiny_bert_dir, tmp_path):
    """The same prompts and responses in two clusters, with the preference reversed between them
    ("formal" wants the long answer, "casual" the short one). Without the cluster the task is a coin
    toss; with the cluster embedded into the input the held-out accuracy beats the plain model's."""
    import random

    rng = random.Random(0)
    rows = []
    for i in range(24):
        short, long = f"ok {i}", f"certainly, here is a full answer {i}"
        for cluster in ("formal", "casual"):
            chosen, rejected = (long, short) if cluster == "formal" else (short, long)
            rows.append(
                {"prompt": f"q {i}", "chosen": chosen, "rejected": rejected, "cluster": cluster}
            )
    rng.shuffle(rows)
    data = write_jsonl(tmp_path / "domains.jsonl", rows)
    result = train_reward_model(
        _config(
            tiny_bert_dir,
            data,
            tmp_path / "run",
            cluster_conditioning=True,
            epochs=12,
            batch_size=8,
            learning_rate=5e-3,
            annotator_head_learning_rate=5e-2,
            eval_fraction=0.25,
            lr_scheduler="constant",
        )
    )
    summary = result.summary
    assert set(summary["clusters"]) == {"casual", "formal"}
    assert all(norm > 0 for norm in summary["clusters"].values())
    assert summary["eval/accuracy"] >= 0.75
    assert summary["eval/accuracy"] > summary["plain/eval/accuracy"]
    saved = json.loads((tmp_path / "run" / "final" / "cluster_conditioning.json").read_text())
    assert saved["clusters"] == ["casual", "formal"] and len(saved["weight"]) == 2


def test_the_work_before_the_first_step_is_reported_as_phases(tiny_bert_dir, pairs_file, tmp_path):
    """Before step 1 the run page hears what the recipe does: loading the model (no count), then
    tokenising the 8 pairs in batches of 3 (ceil(8 / 3) = 3 batches: 0, 1, 2 and 3 of 3), and only
    then the steps."""
    from training.recipes import TrainingCallback

    heard: list[tuple] = []

    class Record(TrainingCallback):
        def on_phase(self, *, phase: str, done: int, total: int) -> None:
            heard.append((phase, done, total))

        def on_step(self, *, step: int, total_steps: int) -> None:
            heard.append(("step", step))

    train_reward_model(_config(tiny_bert_dir, pairs_file, tmp_path, max_steps=1), Record())
    assert heard == [
        ("loading the reward model", 0, 0),
        ("tokenising pairs", 0, 3),
        ("tokenising pairs", 1, 3),
        ("tokenising pairs", 2, 3),
        ("tokenising pairs", 3, 3),
        ("step", 1),
    ]

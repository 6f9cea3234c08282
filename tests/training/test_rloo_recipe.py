"""The RLOO recipe on a tiny Llama policy with a tiny Llama reward model."""

import json

import pytest
import torch

from tests.helpers.recipes import StopAfter, rloo_config
from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes.rloo import train_rloo


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def test_rloo_steps_change_the_policy_and_log_health_metrics(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """Two steps of 2 prompts x 2 samples: finite loss, KL 0 on the first step (policy = reference),
    the metrics PIPELINE.md monitors, and weights that moved."""
    from safetensors.torch import load_file

    result = train_rloo(
        rloo_config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path, kl_controller="adaptive"
        )
    )
    rows = _metrics(tmp_path)
    assert result.status == "completed" and [r["step"] for r in rows] == [1, 2]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-5)
    for key in ("loss", "reward/score_mean", "reward/score_std", "kl_coef", "eos_rate"):
        assert key in rows[0]
    assert 0 < rows[0]["entropy"] < 10  # nats per token; the untrained tiny model is near uniform
    assert result.summary["samples_per_second"] > 0
    before = load_file(str(tiny_llama_dir / "model.safetensors"))
    after = load_file(f"{result.final_model_dir}/model.safetensors")
    assert any(not torch.equal(before[name], after[name]) for name in before)


def test_rloo_cancel_and_resume_is_exact(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path):
    """Cancelled after step 1 and resumed (sampling RNG, KL controller and normaliser restored):
    the same weights as 2 uninterrupted steps."""
    from safetensors.torch import load_file

    straight = train_rloo(
        rloo_config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "a", kl_controller="variance"
        )
    )
    config = rloo_config(
        tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "b", kl_controller="variance"
    )
    assert train_rloo(config, StopAfter(1)).status == "cancelled"
    resumed = train_rloo(config)
    a = load_file(f"{straight.final_model_dir}/model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/model.safetensors")
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_a_cluster_conditioned_reward_model_scores_each_prompt_in_its_cluster(
    tiny_llama_dir, tiny_reward_dir, tmp_path
):
    """A reward model saved with cluster conditioning (as ``cluster_conditioning=True`` saves it):
    the online scorer reads each prompt's cluster from the data rows, a prompt in a cluster scores
    differently from the plain model, one without a cluster exactly alike, a variant of a prompt
    (PPO's perturbed instructions) in its original's cluster; RLOO trains with it and says so."""
    import shutil

    from training.recipes.cluster_conditioning import CONDITIONING_FILE, ClusterConditioning
    from training.recipes.data import load_prompt_clusters
    from training.recipes.models import load_tokenizer
    from training.recipes.scoring import RewardScorer, load_sequence_classifier

    reward = shutil.copytree(tiny_reward_dir, tmp_path / "rm")
    tokenizer = load_tokenizer(reward)
    model = load_sequence_classifier(reward, device=torch.device("cpu"), tokenizer=tokenizer)
    hidden = model.get_input_embeddings().embedding_dim
    weight = [[0.5] * hidden, [0.0] * hidden]
    (reward / CONDITIONING_FILE).write_text(json.dumps({"clusters": ["a", "b"], "weight": weight}))
    rows = [
        {"prompt": p, **({"cluster": "a"} if i < 4 else {})} for i, (p, _, _) in enumerate(PAIRS)
    ]
    prompts = write_jsonl(tmp_path / "prompts.jsonl", rows)

    clusters = load_prompt_clusters(prompts)
    assert len(clusters) == 4 and set(clusters.values()) == {"a"}
    plain = RewardScorer(model.eval(), tokenizer, max_length=128, prompt_budget=64)
    inside, outside = ((("user", PAIRS[0][0]),), (("user", PAIRS[5][0]),))
    inputs = [plain.encode(inside, "fine."), plain.encode(outside, "fine.")]
    with torch.no_grad():
        before = plain.score(inputs, plain.clusters_for([inside, outside]))
        conditioning = ClusterConditioning.load(reward, hidden)
        plain.condition_on(conditioning.requires_grad_(False), clusters)
        after = plain.score(inputs, plain.clusters_for([inside, outside]))
        variant = (("user", PAIRS[0][0] + "\n\nBe brief."),)
        plain.share_clusters([variant], [inside])
        assert plain.clusters_for([variant]) == [conditioning.index["a"]]
    assert plain.conditioned_clusters() == 2
    assert not torch.isclose(after[0], before[0])
    assert after[1] == before[1]

    result = train_rloo(rloo_config(tiny_llama_dir, reward, prompts, tmp_path / "run"))
    assert result.status == "completed" and result.summary["reward_clusters"] == 2


def test_conditioning_of_the_wrong_size_is_refused(tmp_path):
    from training.recipes.cluster_conditioning import CONDITIONING_FILE, ClusterConditioning

    (tmp_path / CONDITIONING_FILE).write_text(json.dumps({"clusters": ["a"], "weight": [[1.0]]}))
    with pytest.raises(ValueError, match=r"expected \[1, 8\]"):
        ClusterConditioning.load(tmp_path, 8)
    assert ClusterConditioning.load(tmp_path / "elsewhere", 8) is None

"""Reward-model ensembles in the online recipes (PPO, RLOO, GRPO): the ensemble.json contract, the
objective (mean / wco / uwo) as the per-sample reward, the members' disagreement logged every step,
and each member's held-out reward at every evaluation."""

import json
import shutil

import pytest
import torch

from tests.helpers.recipes import grpo_config, ppo_config, rloo_config
from training.recipes.config import RLOOConfig
from training.recipes.grpo import train_grpo
from training.recipes.online import load_reward_scorer, objective_scores, score_rollout_members
from training.recipes.ppo import train_ppo
from training.recipes.rloo import train_rloo
from training.recipes.scoring import ENSEMBLE_FILE

CPU = torch.device("cpu")


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def _weights(result):
    from safetensors.torch import load_file

    return load_file(f"{result.final_model_dir}/model.safetensors")


def one_member_ensemble(reward_dir, folder):
    """``reward_dir`` as the only member of an independent ensemble saved in ``folder``."""
    folder.mkdir()
    shutil.copytree(reward_dir, folder / "member_0")
    (folder / ENSEMBLE_FILE).write_text(
        json.dumps({"mode": "independent", "size": 1, "members": ["member_0"]})
    )
    return folder


def heads_ensemble(reward_dir, folder, k=3):
    """The tiny reward model with K heads: head 0 is its own, heads 1..K-1 random (seeded), so
    member 0 scores exactly as the plain model and the others disagree with it."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    plain = AutoModelForSequenceClassification.from_pretrained(str(reward_dir), num_labels=1)
    config = plain.config
    config.num_labels = k
    model = AutoModelForSequenceClassification.from_config(config)
    state = plain.state_dict()
    torch.manual_seed(7)
    state["score.weight"] = torch.cat([state["score.weight"], torch.randn(k - 1, 32)])
    model.load_state_dict(state)
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(reward_dir)).save_pretrained(str(folder))
    (folder / ENSEMBLE_FILE).write_text(json.dumps({"mode": "heads", "size": k}))
    return folder


def test_a_one_member_ensemble_and_every_objective_train_exactly_like_the_plain_model(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """With K = 1 the members' mean, minimum and mean - lambda * 0 are the member's score, bit for
    bit: RLOO against the plain reward model (objective mean, as every recipe test today), the
    same model with objective wco, and a one-member independent ensemble with uwo log the same
    losses and rewards and end with the same weights; no ensemble metric is logged."""
    member = one_member_ensemble(tiny_reward_dir, tmp_path / "ens1")
    runs = [
        train_rloo(rloo_config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "plain")),
        train_rloo(
            rloo_config(
                tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "wco",
                reward_objective="wco",
            )
        ),
        train_rloo(
            rloo_config(
                tiny_llama_dir, member, prompts_file, tmp_path / "uwo", reward_objective="uwo"
            )
        ),
    ]  # fmt: skip
    rows = [_metrics(tmp_path / name) for name in ("plain", "wco", "uwo")]
    for other in rows[1:]:
        assert [r["loss"] for r in other] == [r["loss"] for r in rows[0]]
        assert [r["reward/score_mean"] for r in other] == [r["reward/score_mean"] for r in rows[0]]
        assert [r["eval_reward_mean"] for r in other if "eval_reward_mean" in r] == [
            r["eval_reward_mean"] for r in rows[0] if "eval_reward_mean" in r
        ]
    assert not any(key.startswith(("ensemble/", "eval_ensemble")) for r in rows[2] for key in r)
    plain = _weights(runs[0])
    for run in runs[1:]:
        assert all(torch.equal(plain[name], weight) for name, weight in _weights(run).items())


def test_a_heads_ensemble_scores_k_members_and_wco_is_below_the_mean(
    tiny_reward_dir, prompts_file, tmp_path
):
    """A 3-head ensemble: the scorer gives [3, R]; member 0 equals the plain reward model's score;
    wco (the minimum) <= mean >= uwo on every answer, and they differ where members disagree."""
    from training.recipes.online import Rollout

    ensemble = heads_ensemble(tiny_reward_dir, tmp_path / "heads")
    rollouts = [
        Rollout(((("user"), "Add 2 and 3."),), (), (), True, text)
        for text in ("2 + 3 = 5.", "Paris.", "No idea, sorry.", "Eight.")
    ]

    def config(reward, objective="mean"):
        return RLOOConfig(
            model=str(reward), reward_model=str(reward), data=str(prompts_file),
            output_dir=str(tmp_path / "out"), device="cpu", reward_objective=objective,
        )  # fmt: skip

    members = score_rollout_members(load_reward_scorer(config(ensemble), CPU), rollouts, 4)
    plain = score_rollout_members(load_reward_scorer(config(tiny_reward_dir), CPU), rollouts, 4)
    assert members.shape == (3, 4) and plain.shape == (1, 4)
    assert torch.allclose(members[0], plain[0], atol=1e-6)
    mean = objective_scores(members, config(ensemble)).reward
    wco = objective_scores(members, config(ensemble, "wco")).reward
    uwo = objective_scores(members, config(ensemble, "uwo"))
    assert torch.equal(wco, members.min(dim=0).values)
    assert (wco <= mean).all() and (uwo.reward <= mean).all() and (wco < mean).any()
    spread = members.var(dim=0, unbiased=False)
    assert torch.allclose(uwo.reward, mean - 0.5 * spread, atol=1e-6)
    assert torch.allclose(uwo.columns["ensemble/disagreement_std"], spread.sqrt(), atol=1e-6)


def test_rloo_on_a_heads_ensemble_logs_disagreement_and_each_members_held_out_reward(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """RLOO with objective wco on a 3-head ensemble: every step logs the members' disagreement and
    their plain mean, which is at least the optimised (minimum) score; every evaluation logs each
    member's held-out reward and the disagreement on the policy's answers, and the objective's
    held-out reward is at most every member's mean."""
    ensemble = heads_ensemble(tiny_reward_dir, tmp_path / "heads")
    result = train_rloo(
        rloo_config(
            tiny_llama_dir, ensemble, prompts_file, tmp_path / "run", reward_objective="wco",
            eval_every=1,
        )
    )  # fmt: skip
    rows = _metrics(tmp_path / "run")
    assert result.status == "completed" and len(rows) == 2
    for row in rows:
        assert row["ensemble/disagreement_std"] > 0
        assert row["reward/score_mean"] <= row["ensemble/member_mean"]
        members = [row[f"eval_reward_member_{k}"] for k in range(3)]
        assert row["eval_ensemble_disagreement"] > 0
        assert row["eval_reward_mean"] <= min(members) + 1e-6


def test_ppo_and_grpo_optimise_the_ensemble_objective(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """PPO (uwo) and GRPO (wco, reward model only) on a 3-head ensemble run and log the members'
    disagreement every step, the score under the objective below the members' mean."""
    ensemble = heads_ensemble(tiny_reward_dir, tmp_path / "heads")
    ppo = train_ppo(
        ppo_config(
            tiny_llama_dir, ensemble, prompts_file, tmp_path / "ppo", reward_objective="uwo",
            max_steps=1,
        )
    )  # fmt: skip
    grpo = train_grpo(
        grpo_config(
            tiny_llama_dir, prompts_file, tmp_path / "grpo", reward_model=str(ensemble),
            rewards=(), reward_objective="wco", max_steps=1,
        )
    )  # fmt: skip
    assert ppo.status == grpo.status == "completed"
    ppo_row, grpo_row = _metrics(tmp_path / "ppo")[0], _metrics(tmp_path / "grpo")[0]
    assert ppo_row["ensemble/disagreement_std"] > 0 and grpo_row["ensemble/disagreement_std"] > 0
    assert ppo_row["reward/score_mean"] <= ppo_row["ensemble/member_mean"]
    assert grpo_row["reward/reward_model_mean"] <= grpo_row["ensemble/member_mean"]


def test_a_malformed_ensemble_is_refused_before_training(tiny_reward_dir, prompts_file, tmp_path):
    """An ensemble.json naming an unknown mode: the online recipe's loader refuses it naming the
    file and the field (scoring.EnsembleManifest.read; its own tests cover every field)."""
    folder = shutil.copytree(tiny_reward_dir, tmp_path / "bad")
    (folder / ENSEMBLE_FILE).write_text(json.dumps({"mode": "bagged", "size": 2}))
    config = RLOOConfig(
        model=str(folder), reward_model=str(folder), data=str(prompts_file),
        output_dir=str(tmp_path / "out"), device="cpu",
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"ensemble\.json: mode must be one of"):
        load_reward_scorer(config, CPU)


def test_uwo_lambda_must_not_be_negative(tmp_path):
    """A negative uwo_lambda is refused by the config, naming the field."""
    from training.recipes.config import ConfigError

    with pytest.raises(ConfigError, match="uwo_lambda: must be >= 0"):
        RLOOConfig(model="m", reward_model="r", data="d", output_dir=str(tmp_path), uwo_lambda=-0.1)

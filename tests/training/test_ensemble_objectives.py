"""Reward-model ensemble objectives (mean, wco, uwo; Coste et al. 2024) and the members' disagreement."""

import pytest
import torch

from training.algorithms import (
    ENSEMBLE_OBJECTIVES,
    ensemble_disagreement,
    ensemble_reward,
)

# Three members (rows) score two responses (columns).
MEMBERS = torch.tensor([[1.0, 2.0], [2.0, 2.0], [6.0, 2.0]])


def test_hand_values():
    """Response 0: members 1, 2, 6 -> mean 3, min 1, Var = (4 + 1 + 9) / 3 = 14/3, so uwo with
    lambda 0.5 = 3 - 7/3 = 2/3. Response 1: all members say 2 -> 2 under every objective."""
    assert ensemble_reward(MEMBERS, "mean").tolist() == pytest.approx([3.0, 2.0])
    assert ensemble_reward(MEMBERS, "wco").tolist() == pytest.approx([1.0, 2.0])
    assert ensemble_reward(MEMBERS, "uwo", uwo_lambda=0.5).tolist() == pytest.approx([2 / 3, 2.0])
    assert ensemble_reward(MEMBERS, "uwo", uwo_lambda=0.0).tolist() == pytest.approx([3.0, 2.0])


def test_disagreement_hand_values():
    """Members [[1, 3], [3, 3]]: response 0 has std 1 (Var = (1 + 1) / 2), range 2; response 1 std 0,
    range 0; batch mean std 0.5, max std 1, mean range 1. Logged under ensemble/ names."""
    result = ensemble_disagreement(torch.tensor([[1.0, 3.0], [3.0, 3.0]]))
    assert result.std.tolist() == pytest.approx([1.0, 0.0])
    assert result.range.tolist() == pytest.approx([2.0, 0.0])
    assert result.as_log() == pytest.approx(
        {
            "ensemble/disagreement_std": 0.5,
            "ensemble/disagreement_std_max": 1.0,
            "ensemble/disagreement_range": 1.0,
        }
    )


def test_identical_members_give_one_answer():
    """When the members agree, mean = wco = uwo = that reward, and the disagreement is zero; a single
    member (M = 1) is the same case."""
    row = torch.randn(7, generator=torch.Generator().manual_seed(0))
    for members in (row.repeat(4, 1), row.unsqueeze(0)):
        for objective in ENSEMBLE_OBJECTIVES:
            assert torch.allclose(ensemble_reward(members, objective, uwo_lambda=3.0), row)
        assert ensemble_disagreement(members).std.abs().max().item() == 0.0


def test_ordering_invariants_on_random_ensembles():
    """For any members: wco <= mean, uwo <= mean, and uwo is non-increasing in lambda."""
    members = torch.randn(5, 200, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mean = ensemble_reward(members, "mean")
    assert (ensemble_reward(members, "wco") <= mean).all()
    previous = mean
    for lam in (0.1, 0.5, 1.0, 4.0):
        uwo = ensemble_reward(members, "uwo", uwo_lambda=lam)
        assert (uwo <= previous).all()
        previous = uwo
    assert ensemble_reward(members, "mean").dtype == torch.float64


def test_gradients_flow():
    """d mean / d R_i = 1/M for every member; wco's gradient goes to the lowest member only (member 0
    for response 0, all rows tie at 2 for response 1: torch picks one); d uwo / d R_i = 1/M - lambda *
    2 (R_i - mean) / M, so for response 0 with lambda 0.5: 1/3 - (R_i - 3)/3 = [1, 2/3, -2/3]."""
    members = MEMBERS.clone().requires_grad_(True)
    ensemble_reward(members, "mean").sum().backward()
    assert members.grad[:, 0].tolist() == pytest.approx([1 / 3] * 3)
    members.grad = None
    ensemble_reward(members, "wco")[0].backward()
    assert members.grad[:, 0].tolist() == [1.0, 0.0, 0.0]
    members.grad = None
    ensemble_reward(members, "uwo", uwo_lambda=0.5)[0].backward()
    assert members.grad[:, 0].tolist() == pytest.approx([1.0, 2 / 3, -2 / 3])


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"member_rewards": torch.zeros(3)}, "member_rewards"),
        ({"member_rewards": torch.zeros(0, 2)}, "member_rewards"),
        ({"member_rewards": torch.zeros(2, 2, dtype=torch.long)}, "member_rewards"),
        ({"member_rewards": MEMBERS, "objective": "median"}, "objective"),
        ({"member_rewards": MEMBERS, "objective": "uwo", "uwo_lambda": -0.1}, "uwo_lambda"),
    ],
)
def test_bad_input_names_the_argument(kwargs, argument):
    """A wrong shape, an integer tensor, an unknown objective or a negative lambda is refused, and the
    message says which argument is wrong."""
    with pytest.raises(ValueError, match=argument):
        ensemble_reward(**kwargs)


def test_disagreement_refuses_a_flat_tensor():
    """The disagreement needs members x responses too."""
    with pytest.raises(ValueError, match="member_rewards"):
        ensemble_disagreement(torch.zeros(4))

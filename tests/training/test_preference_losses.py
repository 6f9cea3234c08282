"""Bradley-Terry and DPO losses against values worked out by hand."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training.algorithms import bradley_terry_loss, dpo_loss


def test_bradley_terry_hand_values():
    """Gaps 1 and 0: -log sigmoid(1) = log(1 + e^-1) = 0.3132617 and ln 2 = 0.6931472; mean 0.5032044."""
    loss = bradley_terry_loss(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]))
    assert loss.item() == pytest.approx(0.5032044, abs=1e-6)


def test_bradley_terry_margin_is_subtracted_from_the_gap():
    """A margin of 1 on the first pair turns its gap 1 into 0: both pairs cost ln 2."""
    loss = bradley_terry_loss(
        torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), margin=torch.tensor([1.0, 0.0])
    )
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)


def test_bradley_terry_reward_centering_adds_mean_squared_sum():
    """Centering coefficient 0.1 adds 0.1 * mean((1 + 0)^2, (0 + 0)^2) = 0.05."""
    loss = bradley_terry_loss(
        torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), center_rewards_coef=0.1
    )
    assert loss.item() == pytest.approx(0.5032044 + 0.05, abs=1e-6)


# One pair: policy moved +1 on chosen and -1 on rejected relative to the reference, so h = 2 and,
# with beta 0.1, beta * h = 0.2.
PAIR = {
    "policy_chosen_logps": torch.tensor([-10.0]),
    "policy_rejected_logps": torch.tensor([-12.0]),
    "ref_chosen_logps": torch.tensor([-11.0]),
    "ref_rejected_logps": torch.tensor([-11.0]),
}


def test_dpo_sigmoid_hand_value_and_rewards():
    """-log sigmoid(0.2) = log(1 + e^-0.2) = 0.5981389; implicit rewards 0.1 * (+1) and 0.1 * (-1)."""
    losses, chosen, rejected = dpo_loss(**PAIR, beta=0.1)
    assert losses.item() == pytest.approx(0.5981389, abs=1e-6)
    assert chosen.item() == pytest.approx(0.1, abs=1e-6)
    assert rejected.item() == pytest.approx(-0.1, abs=1e-6)


def test_conservative_dpo_label_smoothing():
    """eps 0.1: 0.9 * log(1 + e^-0.2) + 0.1 * log(1 + e^0.2); since log(1 + e^x) - log(1 + e^-x) = x,
    that is 0.5981389 + 0.1 * 0.2 = 0.6181389."""
    losses, _, _ = dpo_loss(**PAIR, beta=0.1, label_smoothing=0.1)
    assert losses.item() == pytest.approx(0.6181389, abs=1e-6)


def test_ipo_hand_value():
    """(h - 1 / (2 beta))^2 = (2 - 5)^2 = 9."""
    losses, _, _ = dpo_loss(**PAIR, beta=0.1, loss_type="ipo")
    assert losses.item() == pytest.approx(9.0, abs=1e-5)


def test_hinge_hand_value():
    """max(0, 1 - beta h) = 1 - 0.2 = 0.8."""
    losses, _, _ = dpo_loss(**PAIR, beta=0.1, loss_type="hinge")
    assert losses.item() == pytest.approx(0.8, abs=1e-6)


@settings(max_examples=50, deadline=None)
@given(
    chosen=st.floats(-500, 0, allow_nan=False),
    rejected=st.floats(-500, 0, allow_nan=False),
    beta=st.floats(0.01, 5.0),
)
def test_dpo_is_ln2_when_policy_equals_reference(chosen, rejected, beta):
    """With pi = pi_ref, h = 0 whatever the log-probabilities: -log sigmoid(0) = ln 2, rewards 0."""
    c, r = torch.tensor([chosen]), torch.tensor([rejected])
    losses, chosen_rewards, rejected_rewards = dpo_loss(c, r, c.clone(), r.clone(), beta=beta)
    assert losses.item() == pytest.approx(math.log(2), abs=1e-6)
    assert chosen_rewards.item() == 0.0 and rejected_rewards.item() == 0.0


def test_dpo_gradient_at_the_reference():
    """d loss / d log pi(y_w) = -beta * sigmoid(-beta h) = -beta / 2 at h = 0, and +beta / 2 for y_l."""
    chosen = torch.tensor([-5.0], requires_grad=True)
    rejected = torch.tensor([-6.0], requires_grad=True)
    losses, _, _ = dpo_loss(chosen, rejected, torch.tensor([-5.0]), torch.tensor([-6.0]), beta=0.5)
    losses.sum().backward()
    assert chosen.grad.item() == pytest.approx(-0.25)
    assert rejected.grad.item() == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_type": "kto"}, "loss_type"),
        ({"beta": 0.0}, "beta"),
        ({"label_smoothing": 0.5}, "label_smoothing"),
        ({"loss_type": "ipo", "label_smoothing": 0.1}, "label_smoothing"),
    ],
)
def test_dpo_rejects_bad_arguments_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dpo_loss(**PAIR, **kwargs)

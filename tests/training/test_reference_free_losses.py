"""SimPO and ORPO losses against values worked out by hand, TRL's formulas, and their stability."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from training.algorithms.reference_free import log1mexp, orpo_loss, simpo_loss

LN2 = math.log(2.0)


@pytest.mark.parametrize(("gamma", "expected"), [(0.0, LN2), (1.0, 1.3132617), (0.5, 0.9740770)])
def test_simpo_at_equal_logps_is_softplus_gamma(gamma, expected):
    """h = -gamma, -log sigmoid(-gamma) = log(1 + e^gamma): ln 2, log(1 + e) = 1.3132617,
    log(1 + e^0.5) = 0.9740770."""
    logps = torch.tensor([-1.2, -0.4])
    losses, _, _ = simpo_loss(logps, logps, gamma=gamma)
    assert losses.tolist() == pytest.approx([expected, expected], abs=1e-6)


def test_simpo_hand_value_and_rewards():
    """beta 2, averages -1 and -1.5: beta * 0.5 = 1, minus gamma 0.5: -log sigmoid(0.5) =
    log(1 + e^-0.5) = 0.4740770; rewards 2 * -1 = -2 and 2 * -1.5 = -3."""
    losses, chosen, rejected = simpo_loss(torch.tensor([-1.0]), torch.tensor([-1.5]), gamma=0.5)
    assert losses.item() == pytest.approx(0.4740770, abs=1e-6)
    assert (chosen.item(), rejected.item()) == (-2.0, -3.0)


def test_simpo_matches_trls_cpo_simpo_formula():
    """TRL: logits = (c - r) - simpo_gamma / beta; -(1 - eps) logsigmoid(beta logits) - eps
    logsigmoid(-beta logits)."""
    generator = torch.Generator().manual_seed(0)
    chosen, rejected = (-3 * torch.rand(5, generator=generator) for _ in range(2))
    beta, gamma, eps = 2.5, 1.4, 0.1
    ours, _, _ = simpo_loss(chosen, rejected, beta=beta, gamma=gamma, label_smoothing=eps)
    logits = (chosen - rejected) - gamma / beta
    trl = -F.logsigmoid(beta * logits) * (1 - eps) - F.logsigmoid(-beta * logits) * eps
    assert torch.allclose(ours, trl, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"beta": 0.0}, "beta"), ({"gamma": -0.1}, "gamma"), ({"label_smoothing": 0.5}, "label")],
)
def test_simpo_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        simpo_loss(torch.zeros(1), torch.zeros(1), **kwargs)


@pytest.mark.parametrize(
    ("x", "expected"),
    [(math.log(0.5), math.log(0.5)), (math.log(0.2), math.log(0.8)), (-1e-6, -13.8155106)],
)
def test_log1mexp_hand_values(x, expected):
    """log(1 - 0.5) = ln 0.5; log(1 - 0.2) = ln 0.8; log(1 - e^-1e-6) = log(1e-6 - 5e-13) = -13.8155106."""
    assert log1mexp(torch.tensor([x], dtype=torch.float64)).item() == pytest.approx(
        expected, abs=1e-6
    )


def test_log1mexp_gradients_are_finite_on_both_branches():
    """d/dx log(1 - e^x) = -e^x / (1 - e^x): -1 at x = ln 0.5 and -0.25 at ln 0.2, no NaN from the
    branch torch.where did not pick."""
    x = torch.tensor([math.log(0.5) + 1e-4, math.log(0.2), -1e-5, -60.0], requires_grad=True)
    log1mexp(x).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert x.grad[1].item() == pytest.approx(-0.25, abs=1e-5)


def test_orpo_odds_term_is_ln2_at_equal_logps():
    """Equal log-probs: equal odds, log odds ratio 0, -log sigmoid(0) = ln 2; loss = NLL + lam ln 2."""
    logps = torch.tensor([-0.7, -2.0])
    out = orpo_loss(logps, logps, lam=0.1)
    assert out.odds_ratio_losses.tolist() == pytest.approx([LN2, LN2], abs=1e-6)
    assert out.losses.tolist() == pytest.approx([0.7 + 0.1 * LN2, 2.0 + 0.1 * LN2], abs=1e-6)


def test_orpo_hand_value_and_gradient():
    """P(y_w) = 0.5: odds 1, log odds 0. P(y_l) = 0.2: odds 0.25, log odds -ln 4. Log odds ratio
    ln 4 = 1.3862944, L_OR = log(1 + 1/4) = 0.2231436; NLL = ln 2; lam 0.1: 0.6931472 + 0.0223144 =
    0.7154615. d(log odds)/d(avg) = 1 / (1 - P) = 2 for the chosen, and dL_OR/d(log odds ratio) =
    -(1 - sigmoid(ln 4)) = -0.2, so d loss / d chosen = -1 + 0.1 * -0.2 * 2 = -1.04; for the rejected
    0.1 * 0.2 * 1.25 = 0.025."""
    chosen = torch.tensor([math.log(0.5)], requires_grad=True)
    rejected = torch.tensor([math.log(0.2)], requires_grad=True)
    out = orpo_loss(chosen, rejected, lam=0.1)
    assert out.log_odds.item() == pytest.approx(math.log(4), abs=1e-6)
    assert out.odds_ratio_losses.item() == pytest.approx(0.2231436, abs=1e-6)
    assert out.losses.item() == pytest.approx(0.7154615, abs=1e-6)
    out.losses.sum().backward()
    assert chosen.grad.item() == pytest.approx(-1.04, abs=1e-5)
    assert rejected.grad.item() == pytest.approx(0.025, abs=1e-5)
    assert out.chosen_rewards.item() == pytest.approx(0.1 * math.log(0.5))


def test_orpo_with_trls_token_level_nll_reproduces_trls_loss():
    """TRL: loss = nll - mean(beta * logsigmoid(log_odds)), log odds with log1p(-exp(.)); our mean
    of per-pair losses with the same scalar NLL is the same number."""
    generator = torch.Generator().manual_seed(3)
    chosen, rejected = (-2 * torch.rand(4, generator=generator) - 0.1 for _ in range(2))
    nll = torch.tensor(1.7)
    out = orpo_loss(chosen, rejected, lam=0.1, chosen_nll=nll)
    log_odds = (chosen - rejected) - (
        torch.log1p(-torch.exp(chosen)) - torch.log1p(-torch.exp(rejected))
    )
    trl = nll - (0.1 * F.logsigmoid(log_odds)).mean()
    assert out.losses.mean().item() == pytest.approx(trl.item(), abs=1e-6)


def test_orpo_is_finite_near_certainty_and_far_from_it():
    """Average log-probs of 0 (clamped), -1e-9 and -50 give finite losses and gradients."""
    chosen = torch.tensor([0.0, -1e-9, -50.0], requires_grad=True)
    rejected = torch.tensor([-50.0, -1e-9, 0.0], requires_grad=True)
    out = orpo_loss(chosen, rejected)
    out.losses.sum().backward()
    assert torch.isfinite(out.losses).all()
    assert torch.isfinite(chosen.grad).all() and torch.isfinite(rejected.grad).all()


def test_orpo_rejects_bad_input():
    with pytest.raises(ValueError, match="lam"):
        orpo_loss(torch.zeros(1) - 1, torch.zeros(1) - 1, lam=-0.1)
    with pytest.raises(ValueError, match=r"must both be \[B\]"):
        orpo_loss(torch.zeros(2) - 1, torch.zeros(3) - 1)
    with pytest.raises(ValueError, match="chosen_nll"):
        orpo_loss(torch.zeros(2) - 1, torch.zeros(2) - 1, chosen_nll=torch.zeros(3))


@settings(max_examples=30, deadline=None)
@given(chosen=st.floats(-30.0, -1e-3), rejected=st.floats(-30.0, -1e-3))
def test_swapping_the_pair_negates_the_log_odds_and_flips_simpos_margin(chosen, rejected):
    """log odds ratio is antisymmetric; SimPO with gamma 0: loss(w, l) - loss(l, w) = -beta (w - l),
    since softplus(-x) - softplus(x) = -x."""
    good, bad = torch.tensor([chosen]), torch.tensor([rejected])
    forward, backward = orpo_loss(good, bad), orpo_loss(bad, good)
    assert forward.log_odds.item() == pytest.approx(-backward.log_odds.item(), abs=1e-4)
    gap = simpo_loss(good, bad, gamma=0.0)[0] - simpo_loss(bad, good, gamma=0.0)[0]
    assert gap.item() == pytest.approx(-2.0 * (chosen - rejected), abs=1e-4)

"""KL estimators, the KL penalty folded into rewards, and the coefficient controllers."""

import math

import pytest
import torch

from training.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    LinearKLSchedule,
    VarianceKLScheduler,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_penalized_rewards,
)


def test_estimators_hand_values():
    """pi(x) = 1/2, pi_ref(x) = 1/4: k1 = ln 2; k2 = (ln 2)^2 / 2; r = 1/2, k3 = (r - 1) - ln r
    = -0.5 + ln 2."""
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert kl_k1(logp, ref).item() == pytest.approx(math.log(2))
    assert kl_k2(logp, ref).item() == pytest.approx(math.log(2) ** 2 / 2)
    assert kl_k3(logp, ref).item() == pytest.approx(-0.5 + math.log(2))


def test_k1_and_k3_are_unbiased():
    """Averaged exactly over the support with weights p, k1 and k3 both equal KL(p || q).
    p = [1/2, 1/4, 1/4], q = [1/4, 1/4, 1/2]: KL = 1/2 ln 2 + 0 + 1/4 ln(1/2) = ln(2) / 4."""
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    for estimator in (kl_k1, kl_k3):
        assert (p * estimator(p.log(), q.log())).sum().item() == pytest.approx(math.log(2) / 4)


def test_kl_penalty_folded_into_rewards():
    """k1 per token [0.5, 0, (masked)], coefficient 0.1: -0.05 on token 0; the score 1.0 lands on the
    last valid token (index 1); padding stays 0."""
    rewards, kl = kl_penalized_rewards(
        torch.tensor([1.0]),
        torch.tensor([[-1.0, -2.0, -3.0]]),
        torch.tensor([[-1.5, -2.0, -2.0]]),
        torch.tensor([[1, 1, 0]]),
        kl_coef=0.1,
    )
    assert torch.allclose(rewards, torch.tensor([[-0.05, 1.0, 0.0]]))
    assert torch.allclose(kl, torch.tensor([[0.5, 0.0, 0.0]]))


def test_adaptive_controller_follows_ziegler():
    """init 0.2, target 6, horizon 10000, 256 samples a batch. KL 9: error 0.5 clipped to 0.2,
    beta *= 1 + 0.2 * 256 / 10000 = 1.00512 -> 0.201024. KL 3: error -0.5 clipped to -0.2,
    beta *= 0.99488 -> 0.19999476."""
    controller = AdaptiveKLController(0.2, target=6.0, horizon=10_000)
    controller.update(9.0, n_steps=256)
    assert controller.value == pytest.approx(0.201024)
    controller.update(3.0, n_steps=256)
    assert controller.value == pytest.approx(0.19999476)
    restored = AdaptiveKLController(1.0, target=1.0, horizon=1)
    restored.load_state_dict(controller.state_dict())
    assert restored.value == controller.value and restored.target == 6.0


def test_variance_scheduler_raises_the_coefficient_when_kl_jumps():
    """Ten KL values alternating 0 and 0.2 (sample std 0.105 > 0.05): x1.2 once the window is full,
    not before."""
    scheduler = VarianceKLScheduler(0.1)
    for i in range(9):
        scheduler.update(0.2 * (i % 2))
        assert scheduler.value == 0.1
    scheduler.update(0.2)
    assert scheduler.value == pytest.approx(0.12)


def test_variance_scheduler_lowers_it_when_kl_is_steady_and_respects_bounds():
    """Steady KL (std 0 < 0.01): x0.8 per update, floored at 0.02; jumpy KL capped at 0.5."""
    scheduler = VarianceKLScheduler(0.1)
    for _ in range(10):
        scheduler.update(0.15)
    assert scheduler.value == pytest.approx(0.08)
    for _ in range(20):
        scheduler.update(0.15)
    assert scheduler.value == pytest.approx(0.02)
    high = VarianceKLScheduler(0.45)
    for i in range(12):
        high.update(float(i % 2))
    assert high.value == 0.5
    restored = VarianceKLScheduler()
    restored.load_state_dict(high.state_dict())
    assert list(restored.history) == list(high.history) and restored.history.maxlen == 10


def test_linear_schedule_decays_then_holds():
    """0.2 -> 0.02 over 10 updates: 0.11 after 5, 0.02 after 10 and after 20."""
    schedule = LinearKLSchedule(0.2, 0.02, total_updates=10)
    for _ in range(5):
        schedule.update(0.0)
    assert schedule.value == pytest.approx(0.11)
    for _ in range(15):
        schedule.update(0.0)
    assert schedule.value == pytest.approx(0.02)


def test_fixed_controller_never_moves():
    controller = FixedKLController(0.02)
    controller.update(10.0, 100)
    assert controller.value == 0.02

"""Plackett-Luce and multi-aspect regression losses (training.algorithms.listwise) on hand-derived
values and their invariants."""

import math

import pytest
import torch
import torch.nn.functional as F

from training.algorithms.listwise import (
    aspect_regression_loss,
    normalise_ratings,
    plackett_luce_loss,
    weighted_aspect_reward,
)


def test_two_responses_reduce_to_bradley_terry():
    """K = 2: -(s1 - log(e^s1 + e^s2)) = -log sigmoid(s1 - s2), for either order of the ranks."""
    scores = torch.tensor([[1.5, -0.5], [0.2, 0.9]])
    ranks = torch.tensor([[1, 2], [2, 1]])
    expected = -F.logsigmoid(torch.tensor([2.0, 0.7]))
    torch.testing.assert_close(plackett_luce_loss(scores, ranks, reduction="none"), expected)
    torch.testing.assert_close(plackett_luce_loss(scores, ranks), expected.mean())


def test_three_responses_hand_derived():
    """Scores 2, 1, 0 ranked 1, 2, 3: first choice log(e^2 + e + 1) - 2, second log(e + 1) - 1,
    the last costs 0."""
    loss = plackett_luce_loss(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[1, 2, 3]]))
    expected = math.log(math.e**2 + math.e + 1) - 2 + math.log(math.e + 1) - 1
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_ties_follow_breslow():
    """Ranks 1, 1, 3 (two tied best) with scores a, b, c: both tied responses choose from all three,
    so NLL = 2 log(e^a + e^b + e^c) - a - b; at equal scores 2 log 3. A fully tied pair costs
    2 log 2 at equal scores."""
    a, b, c = 0.3, -0.4, 1.1
    loss = plackett_luce_loss(torch.tensor([[a, b, c]]), torch.tensor([[1, 1, 3]]))
    expected = 2 * math.log(math.exp(a) + math.exp(b) + math.exp(c)) - a - b
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    flat = plackett_luce_loss(torch.zeros(1, 3), torch.tensor([[1, 1, 3]]))
    assert flat.item() == pytest.approx(2 * math.log(3), abs=1e-6)
    tied = plackett_luce_loss(torch.zeros(1, 2), torch.tensor([[1, 1]]))
    assert tied.item() == pytest.approx(2 * math.log(2), abs=1e-6)


def test_mask_drops_padding_whatever_its_score_or_rank():
    """A list of 2 padded to 4 costs what the unpadded list costs."""
    scores = torch.tensor([[1.0, 0.0, 50.0, -7.0]])
    ranks = torch.tensor([[1, 2, 1, 0]])
    mask = torch.tensor([[True, True, False, False]])
    loss = plackett_luce_loss(scores, ranks, mask)
    assert loss.item() == pytest.approx(-F.logsigmoid(torch.tensor(1.0)).item(), abs=1e-6)
    one = plackett_luce_loss(scores, ranks, torch.tensor([[True, False, False, False]]))
    assert one.item() == 0.0
    # Padding ranked "better" than anything real, or a list with nothing real: finite gradients.
    scores = torch.zeros(2, 3, requires_grad=True)
    ranks = torch.tensor([[1, 2, -5], [1, 1, 1]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    plackett_luce_loss(scores, ranks, mask).backward()
    assert torch.isfinite(scores.grad).all()


def test_permutation_and_shift_invariance():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 5, generator=generator)
    ranks = torch.tensor([[1, 2, 3, 4, 5], [2, 2, 1, 5, 3], [1, 1, 1, 1, 1], [5, 4, 3, 2, 1]])
    mask = torch.tensor([[True] * 5, [True] * 4 + [False], [True] * 5, [True, False] * 2 + [True]])
    base = plackett_luce_loss(scores, ranks, mask, reduction="none")
    order = torch.tensor([3, 0, 4, 1, 2])
    permuted = plackett_luce_loss(
        scores[:, order], ranks[:, order], mask[:, order], reduction="none"
    )
    torch.testing.assert_close(permuted, base)
    shifted = plackett_luce_loss(
        scores + torch.tensor([[3.0], [-2.0], [10.0], [0.5]]), ranks, mask, reduction="none"
    )
    torch.testing.assert_close(shifted, base)


def test_the_gradient_pushes_the_better_response_up():
    scores = torch.zeros(1, 3, requires_grad=True)
    plackett_luce_loss(scores, torch.tensor([[2, 1, 3]])).backward()
    assert scores.grad[0, 1] < 0 < scores.grad[0, 2]  # descent raises response 1, lowers 2


def test_listwise_loss_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\[B, K\]"):
        plackett_luce_loss(torch.zeros(2, 3), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="mask"):
        plackett_luce_loss(torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="finite"):
        plackett_luce_loss(torch.zeros(1, 2), torch.tensor([[1.0, float("nan")]]))


def test_aspect_regression_loss_and_weighted_reward_hand_derived():
    """Ratings 5 and 2 on a 1-5 scale normalise to 1 and 0.25. Predictions 0.5, 0.25 and a masked
    cell: MSE = (0.25 + 0) / 2. Weighted reward 0.5 * 1 + (-1) * 0.25 = 0.25."""
    targets = normalise_ratings(torch.tensor([[5.0, 2.0, 3.0]]), 1.0, 5.0)
    torch.testing.assert_close(targets, torch.tensor([[1.0, 0.25, 0.5]]))
    predictions = torch.tensor([[0.5, 0.25, 9.0]])
    mask = torch.tensor([[True, True, False]])
    assert aspect_regression_loss(predictions, targets, mask).item() == pytest.approx(0.125)
    assert aspect_regression_loss(predictions, targets, torch.zeros(1, 3, dtype=torch.bool)) == 0
    reward = weighted_aspect_reward(torch.tensor([[1.0, 0.25], [0.0, 1.0]]), [0.5, -1.0])
    torch.testing.assert_close(reward, torch.tensor([0.25, -1.0]))
    with pytest.raises(ValueError, match="weights"):
        weighted_aspect_reward(torch.zeros(2, 3), [1.0, 2.0])

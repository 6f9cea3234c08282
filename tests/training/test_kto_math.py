"""KTO's loss, reference point and class weights, and the unpaired data functions, against values
worked out by hand and TRL's layout of the same formula."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from training.algorithms.kto import kto_balanced_weights, kto_kl_estimate, kto_loss
from training.algorithms.unpaired import UnpairedExample, mismatched_pairs, unpaired_examples


def test_at_the_reference_every_loss_is_half_its_weight():
    """pi = pi_ref: r = 0 and z0 = 0, so 1 - sigmoid(0) = 1/2, times lambda_D = 1 or lambda_U = 1.5."""
    logps = torch.tensor([-5.0, -7.0, -3.0])
    out = kto_loss(
        logps,
        logps,
        torch.tensor([True, False, True]),
        kl_estimate=0.0,
        undesirable_weight=1.5,
    )
    assert out.losses.tolist() == pytest.approx([0.5, 0.75, 0.5])
    assert out.rewards.tolist() == [0.0, 0.0, 0.0]


def test_hand_values_around_the_reference_point():
    """beta 0.1, r = 2, z0 = 0.5: desirable 1 - sigmoid(0.15) = 0.4625702, undesirable
    1 - sigmoid(-0.15) = 0.5374298; rewards 0.1 * 2 = 0.2."""
    out = kto_loss(
        torch.tensor([-8.0, -8.0]),
        torch.tensor([-10.0, -10.0]),
        torch.tensor([True, False]),
        kl_estimate=torch.tensor(0.5),
    )
    assert out.losses.tolist() == pytest.approx([0.4625702, 0.5374298], abs=1e-6)
    assert out.rewards.tolist() == pytest.approx([0.2, 0.2], abs=1e-6)
    assert out.reference_point.item() == 0.5


def test_a_negative_kl_estimate_is_clamped_to_zero():
    """The sample mean of the mismatched log-ratios can be negative; KL cannot, so z0 = 0."""
    out = kto_loss(
        torch.tensor([-1.0]), torch.tensor([-1.0]), torch.tensor([True]), kl_estimate=-0.3
    )
    assert out.reference_point.item() == 0.0
    assert out.losses.item() == pytest.approx(0.5)


def test_kl_estimate_is_the_detached_mean_log_ratio():
    """Log-ratios 0.5 and 1.0: estimate 0.75, with no gradient to the policy."""
    policy = torch.tensor([-1.0, -2.0], requires_grad=True)
    estimate = kto_kl_estimate(policy, torch.tensor([-1.5, -3.0]))
    assert estimate.item() == pytest.approx(0.75)
    assert not estimate.requires_grad


def test_gradients_push_desirable_up_and_undesirable_down():
    """d/dr [1 - sigmoid(beta r)] at r = 0 is -beta / 4 = -0.025; the undesirable loss has +0.025."""
    policy = torch.tensor([-4.0, -4.0], requires_grad=True)
    out = kto_loss(policy, torch.tensor([-4.0, -4.0]), torch.tensor([True, False]), kl_estimate=0.0)
    out.losses.sum().backward()
    assert policy.grad.tolist() == pytest.approx([-0.025, 0.025], abs=1e-7)


def test_matches_trls_split_and_concatenated_layout():
    """TRL computes the two kinds on separate tensors and concatenates desirable then undesirable;
    the same numbers come out of ours in input order."""
    generator = torch.Generator().manual_seed(0)
    policy, ref = (-10 * torch.rand(6, generator=generator) for _ in range(2))
    labels = torch.tensor([True, False, False, True, True, False])
    kl = torch.tensor(0.3)
    out = kto_loss(
        policy, ref, labels, kl_estimate=kl, beta=0.2, desirable_weight=1.0, undesirable_weight=1.3
    )
    chosen = policy[labels] - ref[labels]
    rejected = policy[~labels] - ref[~labels]
    trl = torch.cat(
        (1.0 * (1 - F.sigmoid(0.2 * (chosen - kl))), 1.3 * (1 - F.sigmoid(0.2 * (kl - rejected))))
    )
    ours = torch.cat((out.losses[labels], out.losses[~labels]))
    assert torch.allclose(ours, trl, atol=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": 0.0}, "beta"),
        ({"desirable_weight": 0.0}, "desirable_weight"),
        ({"undesirable_weight": -1.0}, "undesirable_weight"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kto_loss(torch.zeros(1), torch.zeros(1), torch.tensor([True]), kl_estimate=0.0, **kwargs)


def test_bad_shapes_and_labels_are_rejected():
    with pytest.raises(ValueError, match=r"must all be \[N\]"):
        kto_loss(torch.zeros(2), torch.zeros(1), torch.tensor([True]), kl_estimate=0.0)
    with pytest.raises(ValueError, match="bool"):
        kto_loss(torch.zeros(1), torch.zeros(1), torch.tensor([1]), kl_estimate=0.0)
    with pytest.raises(ValueError, match=r"\[M\]"):
        kto_kl_estimate(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="at least one"):
        kto_kl_estimate(torch.zeros(0), torch.zeros(0))


def test_balanced_weights_raise_the_rarer_kind():
    """3 desirable, 1 undesirable: lambda_U = 3 so 1 * 3 = 3 * 1; 2 and 4: lambda_D = 2."""
    assert kto_balanced_weights(3, 1) == (1.0, 3.0)
    assert kto_balanced_weights(2, 4) == (2.0, 1.0)
    assert kto_balanced_weights(5, 5) == (1.0, 1.0)
    with pytest.raises(ValueError, match="both kinds"):
        kto_balanced_weights(4, 0)


def test_unpaired_and_paired_rows_become_unpaired_examples_in_order():
    rows = [
        {"prompt": "Capital of France?", "completion": "Paris.", "label": True},
        {"prompt": "2 + 2?", "chosen": "4", "rejected": "5"},
        {"prompt": "Say hi.", "completion": "Go away.", "label": False},
    ]
    assert unpaired_examples(rows) == [
        UnpairedExample("Capital of France?", "Paris.", True),
        UnpairedExample("2 + 2?", "4", True),
        UnpairedExample("2 + 2?", "5", False),
        UnpairedExample("Say hi.", "Go away.", False),
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (["prompt", "completion"], "row 2: expected an object, got list"),
        ({"prompt": "p"}, "row 2: has neither"),
        ({"prompt": "p", "completion": "c", "label": True, "chosen": "x"}, "row 2: has both"),
        ({"completion": "c", "label": True}, "row 2: 'prompt' is missing"),
        ({"prompt": "p", "completion": "  ", "label": True}, "row 2: 'completion' is empty"),
        ({"prompt": "p", "completion": "c", "label": "true"}, "row 2: 'label' must be true or"),
        ({"prompt": "p", "completion": "c", "label": 1}, "row 2: 'label' must be true or false"),
        ({"prompt": "p", "completion": "c"}, "row 2: 'label' must be"),
        ({"prompt": "p", "chosen": "c"}, "row 2: 'rejected' is missing"),
        ({"prompt": "p", "chosen": ["c"], "rejected": "r"}, "row 2: 'chosen' is a list, not text"),
    ],
)
def test_bad_rows_name_the_row_and_the_field(row, message):
    good = {"prompt": "p", "completion": "c", "label": True}
    with pytest.raises(ValueError, match=message):
        unpaired_examples([good, row])


def test_no_rows_is_an_error():
    with pytest.raises(ValueError, match="no rows"):
        unpaired_examples([])


def test_mismatched_pairs_shift_the_completions_by_one():
    """Prompt i with completion i - 1; the first prompt takes the last completion (TRL's rotation)."""
    examples = [UnpairedExample(f"p{i}", f"c{i}", i % 2 == 0) for i in range(3)]
    assert mismatched_pairs(examples) == [("p0", "c2"), ("p1", "c0"), ("p2", "c1")]
    with pytest.raises(ValueError, match="at least 2"):
        mismatched_pairs(examples[:1])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), kl=st.floats(-1.0, 3.0))
def test_losses_stay_within_zero_and_their_weight(seed, kl):
    """1 - sigmoid lies in (0, 1), so each loss lies in [0, its weight]; every reward is beta * r."""
    generator = torch.Generator().manual_seed(seed)
    policy, ref = (-20 * torch.rand(8, generator=generator) for _ in range(2))
    labels = torch.rand(8, generator=generator) > 0.5
    out = kto_loss(
        policy, ref, labels, kl_estimate=kl, desirable_weight=1.0, undesirable_weight=1.33
    )
    weight = torch.where(labels, 1.0, 1.33)
    assert bool(((out.losses >= 0) & (out.losses <= weight)).all())
    assert torch.allclose(out.rewards, 0.1 * (policy - ref))

"""The packed attention's row gathers: the same values and gradients as ``index_select``."""

import pytest
import torch

from training.recipes.row_gather import RowGather, gather_rows


def _grads(source: torch.Tensor, index: torch.Tensor, weight: torch.Tensor, gather=None):
    x = source.clone().requires_grad_(True)
    out = gather_rows(x, gather) if gather is not None else x.index_select(0, index)
    (out * weight).sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("copies", [1, 2, 4])
def test_values_and_gradients_are_index_selects(copies):
    """Rows copied up to ``copies`` times, some never: same outputs, same gradients (the copies
    summed; a row nobody reads gets zero)."""
    torch.manual_seed(0)
    n_rows, dims = 7, (3, 5)
    index = torch.tensor([r for r in range(n_rows - 1) for _ in range(1 + r % copies)])
    index = index[torch.randperm(index.shape[0])]
    source = torch.randn(n_rows, *dims)
    weight = torch.randn(index.shape[0], *dims)
    ours, our_grad = _grads(source, index, weight, RowGather(index, n_rows))
    plain, plain_grad = _grads(source, index, weight)
    assert torch.equal(ours, plain)
    if copies <= 2:  # two terms add the same way in either order
        assert torch.equal(our_grad, plain_grad)
    else:
        torch.testing.assert_close(our_grad, plain_grad, rtol=0, atol=1e-6)
    assert torch.equal(our_grad[n_rows - 1], torch.zeros(dims))  # the row nobody read


def test_constant_rows_get_no_gradient():
    """Padding slots all read the zero row at the end; it gets no gradient, the others theirs."""
    source = torch.tensor([[1.0], [2.0], [0.0]])
    index = torch.tensor([0, 1, 2, 2, 0, 2])
    gather = RowGather(index, 3, constant_from=2)
    assert len(gather.inverse) == 2  # row 0 is read twice; the zero row's copies do not count
    _, grad = _grads(
        source, index, torch.tensor([[1.0], [10.0], [100.0], [1e3], [1e4], [1e5]]), gather
    )
    assert grad.flatten().tolist() == [1.0 + 1e4, 10.0, 0.0]


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\[S\]"):
        RowGather(torch.zeros(2, 2, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="rows"):
        gather_rows(torch.zeros(3, 1), RowGather(torch.tensor([0, 1]), 2))

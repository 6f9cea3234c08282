"""Row gathers whose backward is row gathers too, not a scatter-add.

``source.index_select(0, index)`` backpropagates through ``index_add_``, which on CPU is a
scatter-add: it walks the index one row at a time and does not vectorise. The packed attention
gathers every layer's queries, keys and values into grids and their outputs back, by the same few
indices, so that backward was the largest single cost of a packed step on CPU (a torch profile of a
SimPO step on SmolLM2: 28% of the time, more than the matrix products).

A row's gradient is the sum of the gradients of the slots that copied it. With the copies of each
row numbered in slot order (j = 0, 1, ...), that sum is K row gathers of the output gradient, K the
most copies any row has (1 for the outputs' gather, 1 or the completions per prompt for the grids'),
added in slot order. With one or two copies (a pair's chosen and rejected share a prompt) that is
exactly the sum ``index_add_`` makes; with more, the same terms in slot order.

Shapes: S slots, R source rows; ``index`` [S] with values in [0, R).
"""

from __future__ import annotations

import torch
from torch import Tensor


class RowGather:
    """``index`` [S] into a source of ``n_rows`` rows, with the inverse maps its backward uses.
    Rows from ``constant_from`` on (e.g. a zero row that padding slots read) get no gradient."""

    def __init__(self, index: Tensor, n_rows: int, constant_from: int | None = None) -> None:
        if index.dim() != 1:
            raise ValueError(f"index must be [S], got {tuple(index.shape)}")
        self.index = index
        self.n_rows = n_rows
        slots = index.shape[0]
        limit = n_rows if constant_from is None else constant_from
        order = torch.argsort(index, stable=True)
        ordered = index[order]
        counts = torch.bincount(index, minlength=n_rows)
        first = torch.cumsum(counts, 0) - counts
        copy = torch.arange(slots, device=index.device) - first[ordered]
        keep = ordered < limit
        copies = int(counts[:limit].max()) if limit > 0 and slots > 0 else 0
        # inverse[j][r]: the slot of row r's j-th copy, or ``slots`` (a zero row) when it has none.
        self.inverse: list[Tensor] = []
        for j in range(copies):
            chosen = keep & (copy == j)
            inverse = torch.full((n_rows,), slots, dtype=torch.long, device=index.device)
            inverse[ordered[chosen]] = order[chosen]
            self.inverse.append(inverse)

    def backward(self, grad: Tensor) -> Tensor:
        """grad [S, ...] -> the source's gradient [n_rows, ...]."""
        padded = torch.cat([grad.contiguous(), grad.new_zeros(1, *grad.shape[1:])])
        if not self.inverse:
            return padded.new_zeros(self.n_rows, *grad.shape[1:])
        total = padded.index_select(0, self.inverse[0])
        for inverse in self.inverse[1:]:
            total = total + padded.index_select(0, inverse)
        return total


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, source: Tensor, gather: RowGather) -> Tensor:
        ctx.gather = gather
        return source.index_select(0, gather.index)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return ctx.gather.backward(grad), None


def gather_rows(source: Tensor, gather: RowGather) -> Tensor:
    """``source.index_select(0, gather.index)`` ([S, ...] from [R, ...]), with the row-gather
    backward (module docstring)."""
    if source.shape[0] != gather.n_rows:
        raise ValueError(f"source has {source.shape[0]} rows, the gather {gather.n_rows}")
    return _GatherRows.apply(source, gather)

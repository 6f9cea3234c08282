"""Data parallelism for the recipes under torchrun (or ``deepspeed`` used as a launcher).

Every rank holds the whole model, takes its share of each optimiser step's rows, and the gradients
are summed across ranks before the step; losses are divided by the *global* row count, so the
summed gradient is exactly the single-process gradient of the whole batch. Only rank 0 writes the
run folder (config, metrics, checkpoints, final model). Launched without torchrun (WORLD_SIZE unset
or 1) all of this is a no-op.

Gradients are summed in one flat all-reduce after backward (not overlapped with it, as DDP would):
the recipes call the decoder's backbone directly to run only the completion positions through the
output layer, which DDP's forward-hook bookkeeping does not follow.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of one step's rows (rank r takes rows r, r + world, ...)."""
        return list(items[self.rank :: self.world])

    def block(self, items: Sequence[T]) -> list[T]:
        """This rank's contiguous share: the ranks' blocks, concatenated in rank order, are ``items``
        again (sizes differ by at most one, earlier ranks taking the extra rows). The online recipes
        shard prompts this way so that rank-major order is the single-process order."""
        base, extra = divmod(len(items), self.world)
        start = self.rank * base + min(self.rank, extra)
        return list(items[start : start + base + (1 if self.rank < extra else 0)])


def setup_distributed(device: torch.device) -> tuple[Ranks, torch.device]:
    """Join the process group torchrun describes (NCCL on CUDA, Gloo on CPU); the device becomes
    this rank's GPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks(), device
    import torch.distributed as dist

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Ranks(rank, world, local_rank), device


def teardown_distributed() -> None:
    """Leave the process group before the process exits after a run that returned (a no-op
    outside one): every rank waits for the others, then the group is destroyed. Not on an error:
    the rank must exit for torchrun to stop the others. Exiting with the group alive leaves Gloo's threads
    to the interpreter's shutdown, which now and then aborts a rank ("terminate called without an
    active exception", SIGABRT) after a run that succeeded."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_gradients(params: Iterable[torch.nn.Parameter], ranks: Ranks) -> None:
    """Sum every parameter's gradient across ranks (a rank without a gradient contributes zeros)."""
    if not ranks.distributed:
        return
    import torch.distributed as dist

    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    for grad, summed in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(summed)


def all_reduce_sum(
    values: dict[str, float], ranks: Ranks, device: torch.device
) -> dict[str, float]:
    """Sum metric sums across ranks (same keys on every rank)."""
    if not ranks.distributed:
        return values
    import torch.distributed as dist

    keys = sorted(values)
    flat = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(flat)
    return dict(zip(keys, flat.tolist(), strict=True))


def any_rank(flag: bool, ranks: Ranks, device: torch.device) -> bool:
    """True on every rank when it is True on one (a cancel seen by one rank stops them all at the
    same step, so no rank waits forever in an all-reduce)."""
    if not ranks.distributed:
        return flag
    import torch.distributed as dist

    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def all_gather_rows(rows: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """Every rank's ``rows`` ([n_r, ...], n_r may differ) concatenated in rank order, on every rank."""
    if not ranks.distributed:
        return rows
    import torch.distributed as dist

    count = torch.tensor([rows.shape[0]], dtype=torch.long, device=rows.device)
    counts = [torch.zeros_like(count) for _ in range(ranks.world)]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    padded = rows.new_zeros((max(sizes), *rows.shape[1:]))
    padded[: rows.shape[0]] = rows
    parts = [torch.zeros_like(padded) for _ in range(ranks.world)]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])


def gather_objects(value: T, ranks: Ranks) -> list[T]:
    """Every rank's picklable ``value``, in rank order, on every rank (e.g. RNG states to save)."""
    if not ranks.distributed:
        return [value]
    import torch.distributed as dist

    values: list[T] = [value] * ranks.world
    dist.all_gather_object(values, value)
    return values


def seed_rank_streams(seed: int, ranks: Ranks) -> None:
    """Give every rank but 0 a random stream of its own (rank 0 keeps the single-process stream), so
    ranks sampling different prompts do not share their random draws. Call it after every rank has
    built the same initial weights from the common seed."""
    if ranks.rank == 0:
        return
    import random

    rank_seed = seed + 7919 * ranks.rank
    random.seed(rank_seed)
    torch.manual_seed(rank_seed)


def barrier(ranks: Ranks) -> None:
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()

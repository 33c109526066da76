"""Megatron-style manual tensor parallel for the compare-merge tests: a column-parallel then a row-parallel linear
holding their own weight shards, an explicit ``all_reduce`` after the row-parallel one. The dumps record plain
tensors (no placements), so compare merges the ranks from a layout description.

As one process (world size 1) the same modules hold the whole weights: the TP=1 reference. ``BED_FAULT=<f>``:
rank 1 scales its shard of the ``up`` output by ``f`` inside the module's forward (a hook of the training's own
would run after probe-tui's and its change would not be recorded), a fault in one rank's shard of one op.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bed_common import DIM, init, train  # noqa: E402


class ColumnParallelLinear(torch.nn.Module):
    def __init__(self, full: torch.nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        rows = full.out_features // world
        self.weight = torch.nn.Parameter(full.weight.detach()[rank * rows:(rank + 1) * rows].clone())
        self.bias = torch.nn.Parameter(full.bias.detach()[rank * rows:(rank + 1) * rows].clone())
        fault = float(os.environ.get("BED_FAULT", "0") or 0)
        self.fault = fault if fault and rank == 1 else 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        return out * self.fault if self.fault else out


class _ReduceGrad(torch.autograd.Function):
    """Identity forward; the all_reduce of the input gradient Megatron's column-parallel layer does."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        return x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if dist.is_initialized():
            grad = grad.clone()
            dist.all_reduce(grad)
        return grad


class RowParallelLinear(torch.nn.Module):
    def __init__(self, full: torch.nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        cols = full.in_features // world
        self.weight = torch.nn.Parameter(full.weight.detach()[:, rank * cols:(rank + 1) * cols].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight)
        if dist.is_initialized():
            out = _AllReduce.apply(out)
        return out


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return grad


class MLP(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        up = torch.nn.Linear(DIM, 2 * DIM)
        down = torch.nn.Linear(2 * DIM, DIM, bias=False)
        self.up = ColumnParallelLinear(up, rank, world)
        self.down = RowParallelLinear(down, rank, world)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(_ReduceGrad.apply(x))))


def main() -> None:
    rank, world = init()
    model = MLP(rank, world)
    train(model, rank)


if __name__ == "__main__":
    main()

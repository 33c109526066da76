"""Megatron-style manual tensor parallel: no DTensor, plain ``nn.Linear`` modules that hold their shard of a seeded
full weight, with the collectives written out in autograd Functions (as Megatron-LM's ``mappings.py`` does):

- ``up``: column-parallel (rows of the weight and bias split over the ranks): its input goes through ``copy_to``
  (identity forward, all-reduce of the gradient in backward); its output stays sharded;
- ``down``: row-parallel (columns of the weight split): its partial output is summed by ``reduce_from``
  (``dist.all_reduce`` in forward, identity backward), then the full bias is added;
- ``head``: column-parallel with a gathered output: ``gather_from`` (``dist.all_gather`` in forward, the rank's
  slice of the gradient in backward).

As one plain process the same model runs with the full layers (the same seeded weights): the TP=1 reference. Each
rank saves its per-step losses.
"""

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from bed_common import DIM, init, train  # noqa: E402


class CopyTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class ReduceFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class GatherFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        world, rank = dist.get_world_size(), dist.get_rank()
        return grad.chunk(world, dim=-1)[rank].contiguous()


def shard(full: torch.nn.Linear, dim: int, rank: int, world: int, with_bias: bool = True) -> torch.nn.Linear:
    """An nn.Linear holding this rank's slice of ``full``'s weight along ``dim`` (0: column-parallel, its output
    features; 1: row-parallel, its input features); the bias follows a column split, a row split has none."""
    weight = full.weight.detach().chunk(world, dim=dim)[rank]
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=with_bias)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if with_bias:
            layer.bias.copy_(full.bias.detach().chunk(world)[rank])
    return layer


class MLP(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        self.world = world
        up, down, head = torch.nn.Linear(DIM, 2 * DIM), torch.nn.Linear(2 * DIM, DIM), torch.nn.Linear(DIM, DIM)
        if world == 1:
            self.up, self.down, self.head = up, down, head
            return
        self.up = shard(up, 0, rank, world)
        self.down = shard(down, 1, rank, world, with_bias=False)
        self.down_bias = torch.nn.Parameter(down.bias.detach().clone())
        self.head = shard(head, 0, rank, world)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return self.head(self.down(torch.relu(self.up(x))))
        h = torch.relu(self.up(CopyTo.apply(x)))
        h = ReduceFrom.apply(self.down(h)) + self.down_bias
        return GatherFrom.apply(self.head(CopyTo.apply(h)))


def main() -> None:
    rank, world = init()
    torch.manual_seed(0)
    model = MLP(rank, world)
    train(model, rank)


if __name__ == "__main__":
    main()

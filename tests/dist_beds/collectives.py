"""Known collectives on 2 ranks (gloo): data parallel by hand around a small linear layer, with one of each kind
of collective whose op, group, dtype and size a test can predict.

Each step, after the backward: the gradients all-reduced in float32 (weight 8x8, bias 8), a bfloat16 copy of the
weight gradient all-reduced (the "bf16 all-reduce" to be seen), the bias gradient all-gathered into one tensor, a
broadcast from rank 1, a MAX all-reduce on a second process group of both ranks, a send from rank 0 to rank 1 and
a functional all-reduce (``torch.distributed._functional_collectives``, what DTensor issues). As one process only
the layer trains (the same numbers on rank 0 of a 1-rank world).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from bed_common import DIM, STEPS, batch, finish, init, save_losses  # noqa: E402


def exchange(layer: torch.nn.Linear, rank: int, world: int, pair: object) -> None:
    import torch.distributed._functional_collectives as funcol

    weight, bias = layer.weight.grad, layer.bias.grad
    dist.all_reduce(weight)
    dist.all_reduce(bias)
    weight /= world
    bias /= world
    half = weight.to(torch.bfloat16)
    dist.all_reduce(half)
    gathered = torch.empty(world * DIM)
    dist.all_gather_into_tensor(gathered, bias)
    token = torch.full((2,), float(rank))
    dist.broadcast(token, src=1)
    peak = bias.abs().max().reshape(1)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=pair)
    message = torch.arange(3, dtype=torch.float64)
    if rank == 0:
        dist.send(message, dst=1)
    elif rank == 1:
        dist.recv(message, src=0)
    total = funcol.all_reduce(bias.detach().clone(), "sum", dist.group.WORLD)
    bias.copy_(total.wait() if hasattr(total, "wait") else total)
    bias /= world


def main() -> None:
    rank, world = init()
    torch.manual_seed(0)
    layer = torch.nn.Linear(DIM, DIM)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    pair = dist.new_group([0, 1]) if world > 1 else None
    values = []
    for step in range(STEPS):
        loss = layer(batch(step, rows=world, start=rank, count=1)).pow(2).mean()
        loss.backward()
        if world > 1:
            exchange(layer, rank, world, pair)
        opt.step()
        opt.zero_grad()
        values.append(loss.item())
    save_losses(rank, values)
    finish()


if __name__ == "__main__":
    main()

"""A NaN made on one rank that every rank then holds: data parallel by hand. Each rank computes
``log(|h| + shift)`` of a small linear layer's output on its slice of the batch and all-reduces the gradients itself
(``dist.all_reduce``, as DDP would); on rank ``BED_NAN_RANK`` (default 2) the shift is -100 in step
``BED_NAN_STEP`` (default 0) (``BED_SHIFT``, e.g. 1.001 for a small divergence instead), so its ``torch.log`` takes the log of negative numbers: NaN, which its backward
carries into its gradients and the all-reduce hands to every rank. A healthy all-reduce of the batch's norm runs
first in each step. As one process (or with ``BED_NAN_RANK=-1``) nothing is poisoned.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from bed_common import DIM, STEPS, batch, finish, init, save_losses  # noqa: E402

NAN_RANK = int(os.environ.get("BED_NAN_RANK", "2"))
NAN_STEP = int(os.environ.get("BED_NAN_STEP", "0"))
SHIFT = float(os.environ.get("BED_SHIFT", "-100"))  # 1.001: a small divergence on that rank instead of a NaN


def main() -> None:
    rank, world = init()
    torch.manual_seed(0)
    layer = torch.nn.Linear(DIM, DIM)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    values = []
    for step in range(STEPS):
        x = batch(step, rows=world, start=rank, count=1)
        norm = x.norm().reshape(1)
        if world > 1:
            dist.all_reduce(norm)
        h = layer(x / norm)
        shift = SHIFT if (world > 1 and rank == NAN_RANK and step == NAN_STEP) else 1.0
        loss = torch.log(h.abs() + shift).pow(2).mean()
        loss.backward()
        if world > 1:
            for p in layer.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        opt.zero_grad()
        values.append(loss.item())
    save_losses(rank, values)
    finish()


if __name__ == "__main__":
    main()

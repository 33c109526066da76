"""Data parallel (DistributedDataParallel): a two-layer MLP; under ``torchrun --nproc_per_node=N`` each rank takes its
slice of the step's global batch and DDP averages the gradients (an all-reduce per bucket in backward).

As one plain process the same model takes the whole global batch: the DP=1 reference. Each rank saves the loss of
its own slice, per step.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from bed_common import DIM, STEPS, batch, finish, init, save_losses  # noqa: E402

ROWS = 4


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(DIM, 2 * DIM)
        self.down = torch.nn.Linear(2 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def main() -> None:
    rank, world = init()
    torch.manual_seed(0)
    model: torch.nn.Module = MLP()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    share = ROWS // world
    values = []
    for step in range(STEPS):
        loss = model(batch(step, ROWS, rank * share, share)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        values.append(loss.item())
    save_losses(rank, values)
    finish()


if __name__ == "__main__":
    main()

"""Pipeline parallel (``torch.distributed.pipelining``): a two-layer MLP split in two stages, ``up`` (and its relu)
on rank 0, ``down`` on rank 1, run by ``ScheduleGPipe`` over 2 micro-batches (activations and their gradients
travel between the stages by send/recv). Each stage keeps the model's own class and names (the other stage's layer
is removed), so a record names the same module on a stage as in the unsplit model.

As one plain process the same model runs unsplit on the whole batch: the PP=1 reference. The last stage saves the
step's loss (the mean of its micro-batch losses); the first stage, which sees no loss, saves the sum of its
parameters after each step, so a changed gradient shows on either stage.
"""

import os
import sys
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from bed_common import DIM, STEPS, batch, finish, init, save_losses  # noqa: E402

ROWS = 4
MICRO_BATCHES = 2


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up: Optional[torch.nn.Linear] = torch.nn.Linear(DIM, 2 * DIM)
        self.down: Optional[torch.nn.Linear] = torch.nn.Linear(2 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.up is not None:
            x = torch.relu(self.up(x))
        if self.down is not None:
            x = self.down(x)
        return x


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (output - target).pow(2).mean()


def main() -> None:
    rank, world = init()
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    values = []
    if world == 1:
        for step in range(STEPS):
            loss = loss_fn(model(batch(step, ROWS)), torch.zeros(ROWS, DIM))
            loss.backward()
            opt.step()
            opt.zero_grad()
            values.append(loss.item())
        save_losses(rank, values)
        finish()
        return
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    assert world == 2, "the pipeline bed has two stages"
    last = rank == world - 1
    if rank == 0:
        model.down = None
    else:
        model.up = None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stage = PipelineStage(model, rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=MICRO_BATCHES, loss_fn=loss_fn)
    for step in range(STEPS):
        if rank == 0:
            schedule.step(batch(step, ROWS))
        else:
            losses: list = []
            schedule.step(target=torch.zeros(ROWS, DIM), losses=losses)
        opt.step()
        opt.zero_grad()
        if last:
            values.append(torch.stack(losses).mean().item())
        else:
            values.append(sum(p.detach().double().sum().item() for p in model.parameters()))
    save_losses(rank, values)
    finish()


if __name__ == "__main__":
    main()

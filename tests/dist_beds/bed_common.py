"""What every test bed shares: gloo on CPU, seeding, a data batch that is the same for the same global sample, and
the per-rank loss file the tests read (``losses_rank<R>.json`` in the working folder).

The beds run as plain scripts (``python bed.py`` or under ``torchrun``, also as a probe-tui ``target.script``), so
this module is imported by path: ``sys.path`` holds the bed's folder.
"""

import json
import os

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("BED_STEPS", "2"))
DIM = 8


def init() -> "tuple[int, int]":
    """(rank, world size); a process group (gloo) only when launched with more than one process."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")
    return (dist.get_rank() if world > 1 else 0), world


def batch(step: int, rows: int = 4, start: int = 0, count: int = 0) -> torch.Tensor:
    """Rows ``start .. start+count`` of step ``step``'s global batch (all of it when count is 0): a data-parallel
    rank takes its slice of the same numbers a single process sees."""
    gen = torch.Generator().manual_seed(1000 + step)
    full = torch.randn(rows, DIM, generator=gen)
    return full[start:start + count] if count else full


def save_losses(rank: int, values: "list[float]") -> None:
    with open("losses_rank%d.json" % rank, "w") as fh:
        json.dump([float(v) for v in values], fh)


def finish() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class MLP(torch.nn.Module):
    """The beds' two-layer MLP (the names ``up``/``down`` the tests look for)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(DIM, 2 * DIM)
        self.down = torch.nn.Linear(2 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def train(model: torch.nn.Module, rank: int, rows: int = 4, start: int = 0, count: int = 0) -> None:
    """``STEPS`` SGD steps on rows ``start .. start+count`` of each step's global batch (all of it when count is 0),
    loss = mean square of the output; saves the rank's losses and ends the process group."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    values = []
    for step in range(STEPS):
        loss = model(batch(step, rows, start, count)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        values.append(loss.item())
    save_losses(rank, values)
    finish()

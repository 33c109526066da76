"""Fully sharded data parallel, FSDP2 (``fully_shard``): a two-layer MLP, each layer and the root sharded over the
ranks (parameters become DTensors sharded on dim 0; all-gathered before use, gradients reduce-scattered). Under
``torchrun --nproc_per_node=N`` each rank takes its slice of the step's global batch.

As one plain process the same model takes the whole global batch, unsharded: the reference. Each rank saves the
loss of its own slice, per step.
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
    model = MLP()
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        fully_shard(model.up, mesh=mesh)
        fully_shard(model.down, mesh=mesh)
        fully_shard(model, mesh=mesh)
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

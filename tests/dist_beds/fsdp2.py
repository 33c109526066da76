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
from bed_common import MLP, init, train  # noqa: E402

ROWS = 4


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
    share = ROWS // world
    train(model, rank, ROWS, rank * share, share)


if __name__ == "__main__":
    main()

"""TP2 x DP2 on a 2-D mesh ("dp", "tp"): the tp.py MLP tensor-parallel inside each dp group (ColwiseParallel then
RowwiseParallel on the tp sub-mesh), FSDP2 (``fully_shard``) over dp, so every parameter is a DTensor on both mesh
dims. Each dp rank takes its half of the global batch.

Under ``torchrun --nproc_per_node=4`` ranks 0,1 and 2,3 are the tp groups, 0,2 and 1,3 the dp groups; as one plain
process the same model runs unsharded on the full batch. Each rank saves its per-step losses (its half's loss).
"""

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# FSDP2 warns that the root returns a view (the row-parallel output): the loss only reads it.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")

import torch  # noqa: E402
from bed_common import MLP, init, train  # noqa: E402

ROWS = 4


def main() -> None:
    rank, world = init()
    torch.manual_seed(0)
    model = MLP()
    start, count = 0, 0
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        if world != 4:
            raise SystemExit("tp_dp.py runs on 4 processes (TP2 x DP2) or as one")
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        model = parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(model, mesh=mesh["dp"])
        count = ROWS // 2
        start = mesh.get_coordinate()[0] * count
    train(model, rank, ROWS, start, count)


if __name__ == "__main__":
    main()

"""Torch-native tensor parallel (DTensor): a two-layer MLP, ColwiseParallel then RowwiseParallel on a 1-D mesh.

Under ``torchrun --nproc_per_node=N`` the layers are sharded over N ranks; as one plain process the same model runs
unsharded: the TP=1 reference of the same weights and data. Each rank saves its per-step losses.
``BED_FAULT=<f>``: rank 1 scales its shard of the ``up`` output by ``f`` (a fault in one rank's shard of one op).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from bed_common import MLP, init, train  # noqa: E402


def main() -> None:
    rank, world = init()
    torch.manual_seed(0)
    model = MLP()
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        model = parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fault = float(os.environ.get("BED_FAULT", "0") or 0)
    if fault and rank == 1:  # inside forward: a hook of the training's own would run after probe-tui's
        up_forward = model.up.forward
        model.up.forward = lambda x: up_forward(x) * fault
    train(model, rank)


if __name__ == "__main__":
    main()

"""Data parallel (DistributedDataParallel): a two-layer MLP; under ``torchrun --nproc_per_node=N`` each rank takes its
slice of the step's global batch and DDP averages the gradients (an all-reduce per bucket in backward).

As one plain process the same model takes the whole global batch: the DP=1 reference. Each rank saves the loss of
its own slice, per step.
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
    model: torch.nn.Module = MLP()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    share = ROWS // world
    train(model, rank, ROWS, rank * share, share)


if __name__ == "__main__":
    main()

"""torch.distributed (gloo) as the process group of a launched compare (:class:`engines.compare.workgroup.WorkGroup`).

torchrun sets ``MASTER_ADDR``/``MASTER_PORT`` (its agent's store) and ``RANK``/``WORLD_SIZE``; under srun the
user exports ``MASTER_ADDR``/``MASTER_PORT`` (the first node, a free port) and the ranks come from Slurm. gloo is
enough: only small Python objects travel through the group. When this process already belongs to a process group
(a compare called inside a launched training script), a gloo group over the same ranks is made beside it.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, List, Optional

import torch.distributed as dist

#: How long a member waits for the others at a collective: the slowest share of the pairs must fit.
TIMEOUT_S = float(os.environ.get("PROBE_TUI_COMPARE_TIMEOUT_S", 24 * 3600))


class TorchGroup:
    def __init__(self, rank: int, size: int):
        timeout = datetime.timedelta(seconds=TIMEOUT_S)
        self._own = not dist.is_initialized()
        if self._own:
            missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
            if missing:
                raise ValueError("{} not set (torchrun sets it; under srun export the first node's address and a "
                                 "free port)".format(" and ".join(missing)))
            dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size, timeout=timeout)
            self._group: Optional[Any] = None
        else:
            self._group = dist.new_group(backend="gloo", timeout=timeout)
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()

    def all_gather(self, obj: Any) -> List[Any]:
        out: List[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self._group)
        return out

    def gather(self, obj: Any) -> Optional[List[Any]]:
        out: Optional[List[Any]] = [None] * self.size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self._group)
        return out

    def broadcast(self, obj: Any) -> Any:
        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]

    def close(self) -> None:
        if self._own and dist.is_initialized():
            dist.destroy_process_group()
        elif self._group is not None:
            dist.destroy_process_group(self._group)
        self._group = None


def open_group(rank: int, size: int) -> TorchGroup:
    return TorchGroup(rank, size)

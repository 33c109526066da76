"""The processes of a launch (torchrun, srun) that share a compare: the seam to torch.distributed.

A compare started by a launcher (``WORLD_SIZE`` > 1 from torchrun, or ``SLURM_STEP_NUM_TASKS`` > 1 inside an
``srun`` step) joins the launch's process group through :class:`WorkGroup`, implemented on torch.distributed
(gloo) in the torch adapter (``engines/adapters/torch/dist_group.py``), loaded by name so that torch stays out of
every compare that is not launched so. The group only splits the work and passes small objects (statuses, file
lists, the summary); the result rows move through files (:mod:`engines.compare.dist_split`).
``PROBE_TUI_COMPARE_LAUNCH=0`` makes a compare run alone although launched so (one rank of a training launch
comparing on its own).
"""

from __future__ import annotations

import os
from typing import Any, List, Mapping, Optional, Protocol, Tuple

from engines.compare.options import CompareError
from engines.frameworks import adapter_module


class WorkGroup(Protocol):
    """The launched processes; every member calls each collective in the same order."""

    rank: int
    size: int

    def all_gather(self, obj: Any) -> List[Any]:
        """Every member's ``obj``, by rank, on every member."""

    def gather(self, obj: Any) -> Optional[List[Any]]:
        """Every member's ``obj``, by rank, on rank 0 (None elsewhere)."""

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every member."""

    def close(self) -> None:
        """Leave the group (tears it down when this process made it)."""


def launched_world(env: Optional[Mapping[str, str]] = None) -> Tuple[int, int]:
    """(rank, world size) of the launch this process belongs to; (0, 1) when it was not launched so."""
    env = os.environ if env is None else env
    if env.get("PROBE_TUI_COMPARE_LAUNCH", "") == "0":  # one process of a launch compares alone
        return 0, 1
    for rank_var, size_var in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS")):
        size_text = env.get(size_var, "")
        if size_text:
            try:
                size, rank = int(size_text), int(env.get(rank_var, ""))
            except ValueError:
                raise CompareError("compare: launched with {}={!r} and {}={!r}, which are not ranks".format(
                    size_var, size_text, rank_var, env.get(rank_var, ""))) from None
            if size > 1:
                if not 0 <= rank < size:
                    raise CompareError("compare: {}={} is outside {}={}".format(rank_var, rank, size_var, size))
                return rank, size
    return 0, 1


def join_launch(env: Optional[Mapping[str, str]] = None) -> Optional[WorkGroup]:
    """The launch's process group, or None when this compare runs alone."""
    rank, size = launched_world(env)
    if size <= 1:
        return None
    try:
        module = adapter_module("pytorch", "dist_group")
    except ImportError as exc:
        raise CompareError("compare: launched as {} processes, which needs torch (torch.distributed) to split "
                           "the work: {}".format(size, exc)) from None
    try:
        group: WorkGroup = module.open_group(rank, size)
    except (RuntimeError, ValueError, OSError) as exc:
        raise CompareError("compare: could not join the launch's process group (rank {} of {}): {}".format(
            rank, size, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)) from None
    return group

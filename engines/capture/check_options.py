"""The capture settings of the checking tasks (``overflow_check``, ``free_benchmark``), which run on the capture
session with their own per-call processor."""

from typing import Any

from engines.capture.options import CaptureOptions
from engines.capture.options import field_of as _get


def capture_options(job: Any) -> CaptureOptions:
    """The capture settings of an overflow_check job (records at its level, no statistics, every data_mode)."""
    output = _get(job, "output", None)
    return CaptureOptions(
        task="statistics",
        level=_get(job, "level", "L1"),
        ranks=tuple(_get(job, "rank", ()) or ()),
        steps=tuple(_get(job, "step", ()) or ()),
        seed=_get(job, "seed", None),
        compression=_get(output, "compression", "none") or "none",
        compression_level=_get(output, "compression_level", None),
        disk_budget=_get(output, "disk_budget", None),
        store_mode=_get(output, "store_mode", "auto") or "auto",
        dump_path=str(_get(job, "dump_path", "./probe_dump") or "./probe_dump"),
    )

"""Stand-in for ``msprobe.mindspore``: ``PrecisionDebugger``, ``seed_all``, ``MsprobeStep`` (the ``Model.train``
callback), ``TrainerMon`` and ``module_dump``/``module_dump_end``, on probe-tui (docs/MSPROBE.md). Importing it
imports no framework; ``MsprobeStep`` imports MindSpore when it is first used."""

from typing import Any, Dict

from probe_tui.compat.msprobe_api import MindSporePrecisionDebugger as PrecisionDebugger
from probe_tui.compat.msprobe_api import TrainerMon, msprobe_step_class, seed_all_for
from probe_tui.debugger import module_dump, module_dump_end

__all__ = ["PrecisionDebugger", "seed_all", "TrainerMon", "module_dump", "module_dump_end"]  # and MsprobeStep (lazy)


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False,
             is_enhanced: bool = False) -> Dict[str, Any]:
    """msprobe's ``seed_all`` for MindSpore: every generator seeded, deterministic kernels with ``mode``."""
    return seed_all_for("mindspore", seed, mode, rm_dropout, is_enhanced)


def __getattr__(name: str) -> Any:
    if name == "MsprobeStep":  # a mindspore.train.Callback subclass: defined where MindSpore may be imported
        return msprobe_step_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

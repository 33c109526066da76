"""Stand-in for ``msprobe.pytorch.monitor.module_hook`` (older releases' ``TrainerMon`` import)."""

from probe_tui.compat.msprobe_api import TrainerMon

__all__ = ["TrainerMon"]

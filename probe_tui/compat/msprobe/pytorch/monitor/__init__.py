"""Stand-in for ``msprobe.pytorch.monitor``."""

from probe_tui.compat.msprobe_api import TrainerMon

__all__ = ["TrainerMon"]

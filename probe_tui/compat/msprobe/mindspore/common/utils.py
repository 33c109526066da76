"""Stand-in for ``msprobe.mindspore.common.utils`` (older releases' ``MsprobeStep`` import)."""

from typing import Any

from probe_tui.compat.msprobe_api import msprobe_step_class


def __getattr__(name: str) -> Any:
    if name == "MsprobeStep":
        return msprobe_step_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

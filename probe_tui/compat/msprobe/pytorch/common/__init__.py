"""Stand-in for ``msprobe.pytorch.common`` (``from msprobe.pytorch.common import seed_all``)."""

from probe_tui.compat.msprobe.pytorch import seed_all

__all__ = ["seed_all"]

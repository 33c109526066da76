"""Stand-in for the ``msprobe`` package (its in-script API): ``msprobe.pytorch`` and ``msprobe.mindspore``.
See ``probe_tui.compat`` and docs/MSPROBE.md."""

__version__ = "probe-tui"

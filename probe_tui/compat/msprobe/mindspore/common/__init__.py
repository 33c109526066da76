"""Stand-in for ``msprobe.mindspore.common``."""

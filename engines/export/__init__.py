"""Writing dumps in other tools' formats (``probe-tui export``): msprobe's dump.json trees (``msprobe``)."""

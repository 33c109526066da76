"""The one error class every kind of bad input ends in.

Readers of stores, dumps, mapping files and run folders each raise their own error (``StoreError``,
``DumpSourceError``, ``MappingError``, ...); all of them are :class:`BadInputError`, so the runner turns any of
them met by an analysis job into the job's ``JobError`` (exit code 2) in one place, and the CLI prints it as one
line. The message is forced onto one line here: HDF5 and JSON errors quoted inside it may span several.
"""

from typing import Any


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines included) turned into one space."""
    return " ".join(str(text).split())


class BadInputError(Exception):
    """A file, path or field that cannot be used. ``str()`` is one line naming it; exit code 2."""

    def __init__(self, *args: Any) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (one_line(args[0]),)
        super().__init__(*args)

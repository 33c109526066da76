"""Open any dump as a :class:`DumpSource`: ours (HDF5 run/rank folders) or msprobe's (dump.json trees).

A source is a set of (rank, step) pieces. Each piece gives a :class:`~engines.parse.rows.RowTable` and a
picklable tensor spec whose ``open()`` returns a reader with ``info(loc)`` and ``read(loc, start, stop)``, so that
worker processes stream full tensors without the parent holding them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from engines.parse.rows import RowTable


class DumpSourceError(ValueError):
    """A path is not a readable dump. The message is one line naming the path."""


class DumpSource:
    """Interface every dump reader implements."""

    origin = ""  # "probe-tui" or "msprobe"
    path: Path

    def ranks(self) -> List[int]:
        raise NotImplementedError

    def steps(self, rank: int) -> List[int]:
        raise NotImplementedError

    @property
    def framework(self) -> str:
        return ""

    def holds(self) -> Dict[str, bool]:
        """Which data the dump has: ``{"tensor": .., "statistics": .., "md5": ..}``."""
        raise NotImplementedError

    def rows(self, rank: int, step: int) -> RowTable:
        raise NotImplementedError

    def tensor_spec(self, rank: int, step: int):
        raise NotImplementedError

    def tree(self, rank: int, step: int) -> Dict[str, Optional[str]]:
        """Module hierarchy: record -> enclosing module record."""
        return {}

    def describe(self) -> str:
        return str(self.path)

    def notes(self) -> List[str]:
        """What a reader should know about the dump's completeness: a dump the disk stopped, a partial last step
        (docs/FORMAT.md, "Partial steps"), a rank without a complete step."""
        return []

    def close(self) -> None:
        pass


def open_dump(path) -> DumpSource:
    """The dump at ``path``: a probe-tui run folder, ``latest`` link, rank folder or dump_path; a msprobe
    dump.json, rank dir, step dir or dump_path. Raises :class:`DumpSourceError` (one line naming the path)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DumpSourceError("{}: no such file or folder".format(path))
    from engines.msprobe_io.layout import find_dump_files

    try:
        files = find_dump_files(path)
    except (OSError, ValueError) as exc:
        raise DumpSourceError(str(exc)) from None
    if files:
        from engines.msprobe_io.source import MsprobeSource

        return MsprobeSource(path, files)
    from engines.parse.probe_source import find_probe_dump

    found = find_probe_dump(path)
    if found is not None:
        return found
    raise DumpSourceError("{}: neither a probe-tui dump (run or rank folder) nor a msprobe dump (dump.json)"
                          .format(path))

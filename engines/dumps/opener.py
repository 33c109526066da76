"""Open any dump as a :class:`~engines.dumps.source.DumpSource`: ours (HDF5 run/rank folders) or msprobe's
(dump.json trees). The one entry every analysis (parse, compare, the app's dump browser) reads dumps through.
"""

from __future__ import annotations

from pathlib import Path

from engines.dumps.msprobe.layout import find_dump_files
from engines.dumps.msprobe.source import MsprobeSource
from engines.dumps.probe_source import find_probe_dump
from engines.dumps.source import DumpSource, DumpSourceError, reading
from engines.safe_fs import PathLike


def open_dump(path: PathLike) -> DumpSource:
    """The dump at ``path``: a probe-tui run folder, ``latest`` link, rank folder or dump_path; a msprobe
    dump.json, rank dir, step dir or dump_path. Raises :class:`DumpSourceError` (one line naming the path)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DumpSourceError("{}: no such file or folder".format(path))
    try:
        files = find_dump_files(path)
    except (OSError, ValueError) as exc:
        raise DumpSourceError(str(exc)) from None
    if files:
        return MsprobeSource(path, files)
    with reading(path):
        found = find_probe_dump(path)
    if found is not None:
        return found
    raise DumpSourceError("{}: neither a probe-tui dump (run or rank folder) nor a msprobe dump (dump.json)"
                          .format(path))

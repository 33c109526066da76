"""Finding stores in run folders: ``<run>/rank<R>/`` and the kinds of store each holds."""

import re
from pathlib import Path
from typing import Dict, List

from engines.safe_fs import PathLike

from .announce import kinds_in
from .errors import StoreError

_RANK_RE = re.compile(r"^rank(\d+)$")


def open_rank_dirs(run_dir: PathLike) -> Dict[int, Path]:
    """``{rank: folder}`` for the ``rank<R>`` folders of a run, in rank order."""
    run = Path(run_dir)
    if not run.is_dir():
        raise StoreError(f"{run}: no such run folder")
    found = {}
    for child in run.iterdir():
        m = _RANK_RE.match(child.name)
        if m and child.is_dir():
            found[int(m.group(1))] = child
    if not found:
        raise StoreError(f"{run}: no rank<R> folders (not a probe-tui run folder)")
    return dict(sorted(found.items()))


def store_kinds(directory: PathLike) -> List[str]:
    """Kinds of store a rank folder holds (``dump``, ``metrics``, ...); empty when it holds none."""
    d = Path(directory)
    if not d.is_dir():
        raise StoreError(f"{d}: no such folder")
    return kinds_in(d)

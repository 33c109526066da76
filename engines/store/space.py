"""Disk space for a store being written: what a write will add to its file, what the file system has left, and
how to let go of an HDF5 file that a failed write left unusable.

A full disk must stop a store, never the training that feeds it (docs/FORMAT.md, "When the disk fills"). The
writer therefore checks, before it hands a step to HDF5, that the step fits (in ``disk_budget`` and in the free
space, less a reserve for closing the file and the run's bookkeeping). A write can still fail (another process
filled the disk meanwhile, a quota, ``RLIMIT_FSIZE``): HDF5 then holds dirty metadata it cannot write, and closing
the file fails, leaving handles that crash the process later. ``abandon`` points the file's descriptor at an
anonymous in-memory file first, so HDF5's closing writes land there and succeed; the file on disk stays as it was
after its last successful flush, which is every committed step (the commit log hides the rest).
"""

import errno
import os
import re
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from engines.safe_fs import PathLike

from .spec import TableSpec

#: Errors that mean "no room": the disk or a quota is full, or the file may not grow (RLIMIT_FSIZE).
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
#: Free space kept back when deciding whether a step fits: room to close the file (its last metadata), the
#: ``close`` line of segments.jsonl and the final run.json.
RESERVE_BYTES = 256 << 10
#: HDF5 metadata a write may add beside its chunks (object headers, chunk index entries), per dataset touched,
#: per write, and for a new per-step file (its groups, attributes and commit log: ~35 KB measured).
METADATA_PER_DATASET = 1 << 10
METADATA_PER_WRITE = 16 << 10
NEW_FILE_BYTES = 64 << 10

_ERRNO_IN_TEXT = re.compile(r"errno = (\d+)")

#: ``(dataset path, rows appended, bytes a row, rows a chunk as configured)``
Write = Tuple[str, int, int, int]


def errno_of(exc: BaseException) -> Optional[int]:
    """The OS error number behind an exception from h5py (an ``OSError``'s errno, else the ``errno = N`` HDF5
    writes into its messages)."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int):
        return code
    found = _ERRNO_IN_TEXT.search(str(exc))
    return int(found.group(1)) if found else None


def is_no_space(exc: BaseException) -> bool:
    return errno_of(exc) in NO_SPACE_ERRNOS


def free_bytes(directory: PathLike) -> Optional[int]:
    """Bytes an unprivileged writer may still use on the file system holding ``directory`` (None: unknown)."""
    try:
        st = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    return int(st.f_bavail) * int(st.f_frsize)


def growth(writes: Iterable[Write], extents: Dict[str, Tuple[int, int]], *, swmr: bool, compressed: bool,
           final: bool) -> int:
    """Upper bound of the bytes a file grows by when ``writes`` are appended. ``extents`` maps the datasets the
    file has to ``(rows, rows a chunk)``. HDF5 allocates whole chunks; a compressed chunk that was partly filled is
    written again elsewhere; per-step files size a new dataset's chunk to the data written at commit (``final``)."""
    total = 0
    for path, n, row_bytes, chunk in writes:
        if n <= 0:
            continue
        before, have = extents.get(path, (0, 0))
        if have:
            chunk = have
        elif final and not swmr:
            chunk = min(chunk, n)
        chunk = max(1, chunk)
        chunks = -(-(before + n) // chunk) - -(-before // chunk)
        if compressed and before % chunk:
            chunks += 1
        total += chunks * chunk * row_bytes + METADATA_PER_DATASET
    return total + METADATA_PER_WRITE


def abandon(h5file: Any) -> None:
    """Close ``h5file`` (an open ``h5py.File``) without writing to its file again: see the module docstring."""
    try:
        fd = int(h5file.id.get_vfd_handle())
    except Exception:  # closed already, or a driver without a descriptor
        fd = -1
    if fd >= 0:
        try:
            sink = os.memfd_create("probe-tui-abandoned")
        except (AttributeError, OSError):  # no memfd (not Linux): writes to /dev/null succeed too
            sink = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(sink, fd)
        finally:
            os.close(sink)
    with _file_size_limit_lifted():  # a soft RLIMIT_FSIZE (ulimit -S -f) would fail the in-memory file too
        try:
            h5file.close()
        except Exception:
            pass


class _file_size_limit_lifted:
    """Raise the soft RLIMIT_FSIZE to the hard one for a moment (nothing to do where they are equal)."""

    def __enter__(self) -> None:
        self.saved = None
        try:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            if soft != hard:
                resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
                self.saved = (soft, hard)
        except (ImportError, OSError, ValueError):
            pass

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, self.saved)


def budget_chunks(budget: int, tables: Sequence[TableSpec], chunk_rows: int, pool_chunk_bytes: int) -> Tuple[int, int]:
    """Chunk sizes for a store under ``disk_budget``: the first chunk of every table column together takes at most
    an eighth of the budget, a pool chunk at most a 32nd (HDF5 allocates whole chunks)."""
    row_bytes = sum(c.storage_dtype.itemsize * (c.width or 1) for t in tables for c in t.columns) + 16
    rows = max(64, budget // 8 // max(1, row_bytes))
    return min(int(chunk_rows), rows), min(int(pool_chunk_bytes), max(4 << 10, budget // 32))


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 240 else text[:237] + "..."


def size_text(n: int) -> str:
    x = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(x) < 1000 or unit == "GB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1000
    return str(x)

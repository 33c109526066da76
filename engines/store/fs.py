"""Which file system a path lives on, and which store mode that allows.

SWMR needs POSIX write semantics and working file locks; network and parallel file systems (NFS, Lustre, GPFS,
...) give neither, so stores there fall back to per-step files closed then announced (docs/decisions/0003-shared-file-systems.md).
"""

import os
import threading
import warnings
from pathlib import Path
from typing import Callable, List, Optional, Set, Tuple

from engines.safe_fs import PathLike

from .errors import StoreError, StoreWarning

SWMR = "swmr"
PER_STEP = "per_step"
MODES = (SWMR, PER_STEP)
MODE_ENV = "PROBE_TUI_STORE_MODE"

#: File system types where HDF5 file locking and SWMR are unreliable.
NETWORK_FS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "fuse.sshfs", "sshfs", "ceph",
    "fuse.ceph", "fuse.ceph-fuse", "9p", "glusterfs", "fuse.glusterfs", "afs", "panfs", "pvfs2", "orangefs",
    "wekafs", "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs", "fuse.beegfs", "davfs", "fuse.davfs2",
})

_MOUNTINFO = "/proc/self/mountinfo"
_MOUNTS = "/proc/mounts"


def read_mountinfo() -> Tuple[str, str]:
    """Return ``(text, format)``: format is ``"mountinfo"`` or ``"mounts"``, text empty when neither is readable."""
    for path, fmt in ((_MOUNTINFO, "mountinfo"), (_MOUNTS, "mounts")):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read(), fmt
        except OSError:
            continue
    return "", "mountinfo"


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal: \040 \011 \012 \134
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
            continue
        out.append(field[i])
        i += 1
    return "".join(out)


def parse_mounts(text: str, fmt: str = "mountinfo") -> List[Tuple[str, str]]:
    """``[(mount point, fs type), ...]`` from /proc/self/mountinfo (or /proc/mounts) text."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if fmt == "mounts":
            if len(parts) >= 3:
                mounts.append((_unescape(parts[1]), parts[2]))
            continue
        if "-" not in parts or len(parts) < 5:
            continue
        sep = parts.index("-")
        if sep + 1 < len(parts):
            mounts.append((_unescape(parts[4]), parts[sep + 1]))
    return mounts


def _resolved(path: Path) -> Path:
    """``path`` with symlinks resolved in the part that exists (the store folder may not exist yet)."""
    p = Path(os.path.abspath(path))
    rest = []
    while not p.exists() and p != p.parent:
        rest.append(p.name)
        p = p.parent
    return Path(os.path.realpath(p)).joinpath(*reversed(rest))


def filesystem_type(path: PathLike, mountinfo: Optional[Tuple[str, str]] = None) -> str:
    """The fs type of the mount holding ``path`` (the longest matching mount point; later mounts win ties).

    ``mountinfo`` is ``(text, format)`` as from :func:`read_mountinfo`; tests inject fake tables here.
    Returns ``""`` when it cannot tell."""
    text, fmt = mountinfo if mountinfo is not None else read_mountinfo()
    target = str(_resolved(Path(path)))
    best, best_len = "", -1
    for mount_point, fstype in parse_mounts(text, fmt):
        mp = mount_point.rstrip("/") or "/"
        if target == mp or mp == "/" or target.startswith(mp + "/"):
            if len(mp) >= best_len:
                best, best_len = fstype, len(mp)
    return best


def is_network_fs(fstype: str) -> bool:
    return fstype in NETWORK_FS or fstype.startswith("nfs")


_warned: Set[str] = set()
_warn_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """Warn once per process for each key."""
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, StoreWarning, stacklevel=3)


def _reset_warnings_for_tests() -> None:
    with _warn_lock:
        _warned.clear()


def resolve_mode(directory: PathLike, requested: str = "auto",
                 detector: Optional[Callable[[Path], str]] = None) -> Tuple[str, bool]:
    """Pick the store mode for ``directory``: returns ``(mode, network_fs)``.

    Precedence: the ``PROBE_TUI_STORE_MODE`` environment variable, then ``requested`` (the ``output.store_mode``
    config value) unless it is ``"auto"``, then detection. Network file systems choose per-step files and warn
    once; forcing SWMR there warns once too. ``detector`` maps a path to its fs type (default
    :func:`filesystem_type`)."""
    detector = detector or filesystem_type
    fstype = detector(Path(directory))
    network = is_network_fs(fstype)
    env = os.environ.get(MODE_ENV, "").strip().lower()
    if env and env != "auto":
        if env not in MODES:
            raise StoreError(f"{MODE_ENV}={env!r}: expected one of swmr, per_step, auto")
        mode = env
    elif requested and requested != "auto":
        if requested not in MODES:
            raise StoreError(f"output.store_mode {requested!r}: expected one of swmr, per_step, auto")
        mode = requested
    else:
        mode = PER_STEP if network else SWMR
        if network:
            warn_once("network-fs", f"{directory} is on {fstype}, where HDF5 SWMR and file locking fail: "
                                    "writing per-step files (closed, then announced) without file locking")
            return mode, network
    if network and mode == SWMR:
        warn_once("network-fs-swmr", f"{directory} is on {fstype}: SWMR is not supported on network file "
                                     "systems; set output.store_mode to per_step if readers fail")
    return mode, network

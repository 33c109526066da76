"""Build and load the native kernels (every ``*.c`` in this folder, one shared library) with the system C compiler,
once per machine.

The shared library is cached under a per-user folder (``PROBE_TUI_NATIVE_DIR``, else ``$XDG_CACHE_HOME`` or
``~/.cache``, ``probe-tui/native``; where that cannot be created, a read-only or missing home in a container,
``probe-tui-native-<uid>`` in the temporary folder, used only if this user owns it), named by a hash of the source, the flags, the platform and the compiler (its
path, size and modification time: no subprocess when the library is already there). Ranks starting together may
all compile: each writes a private temporary file and renames it into place (atomic), so none reads a half-written
library. The flags are portable (no ``-march=native``: a cache folder may be shared by different nodes; the
kernel picks its vector width at run time) and keep IEEE semantics (no ``-ffast-math``, no fused multiply-add).

``load()`` returns the ctypes library, or None when ``PROBE_TUI_NATIVE=0``, there is no compiler, or the build,
the load or the self-check fails; the caller then keeps its framework path. One log line says why, once.
"""

import ctypes
import hashlib
import logging
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

from engines.native.once import Once

log = logging.getLogger("engines.native")

SOURCE = Path(__file__).with_name("stats.c")
# Every C file of this folder goes into the one library (each kernel in its own file; ``stats.c`` is bound and
# checked here, the others by their own Python module, which checks its functions before use).
SOURCES = tuple(sorted(Path(__file__).parent.glob("*.c")))
HEADERS = tuple(sorted(Path(__file__).parent.glob("*.h")))
"""What the sources include (``pt_common.h``): part of the cache key, not compiled on their own."""
FLAGS = ["-O3", "-fPIC", "-shared", "-pthread", "-ffp-contract=off", "-fno-math-errno", "-fvisibility=default"]
ENV_SWITCH = "PROBE_TUI_NATIVE"
ENV_DIR = "PROBE_TUI_NATIVE_DIR"
BUILD_TIMEOUT_S = 120



def compiler() -> Optional[str]:
    """The C compiler: ``$CC`` (its first word) if set, else ``cc``, ``gcc`` or ``clang`` from PATH."""
    env = os.environ.get("CC", "").split()
    for name in (env[:1] or ["cc", "gcc", "clang"]):
        found = shutil.which(name)
        if found:
            return found
    return None


def cache_dir() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "probe-tui" / "native"


def cache_dirs() -> List[Path]:
    """Where to look for (and build) the library, in order: ``cache_dir()``, then (unless
    ``PROBE_TUI_NATIVE_DIR`` names one) a per-user folder in the temporary folder."""
    if os.environ.get(ENV_DIR):
        return [cache_dir()]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return [cache_dir(), Path(tempfile.gettempdir()) / ("probe-tui-native-%d" % uid)]


def library_path(cc: str, folder: Optional[Path] = None) -> Path:
    """Where the library built from this source by ``cc`` on this platform lives (in ``folder``, by default
    ``cache_dir()``)."""
    st = os.stat(cc)
    key = hashlib.sha256()
    for part in (*(src.read_bytes() for src in SOURCES + HEADERS), " ".join(FLAGS).encode(), sys.platform.encode(),
                 os.uname().machine.encode(), ("%s:%d:%d" % (os.path.realpath(cc), st.st_size,
                                                              st.st_mtime_ns)).encode()):
        key.update(part)
        key.update(b"\0")
    return (folder or cache_dir()) / ("stats-%s.so" % key.hexdigest()[:20])


class FolderError(RuntimeError):
    """The cache folder cannot be made or written (a read-only or missing home)."""


def build(cc: str, target: Path, sources: Sequence[Path] = SOURCES, flags: Sequence[str] = FLAGS) -> None:
    """Compile ``sources`` (by default ``SOURCES``) into ``target`` (temporary file, then an atomic rename); raises
    on failure (``FolderError`` when the folder cannot be made or written)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".stats-", suffix=".so", dir=str(target.parent))
    except OSError as exc:
        raise FolderError("cannot write %s: %s" % (target.parent, exc)) from exc
    os.close(fd)
    try:
        proc = subprocess.run([cc, *flags, "-o", tmp, *map(str, sources), "-lm"], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError("%s exited %d: %s" % (os.path.basename(cc), proc.returncode,
                                                     (proc.stderr or proc.stdout).strip()[-400:]))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cached(cc: str, path_in: Callable[[Path], Path], sources: Sequence[Path] = SOURCES,
           flags: Sequence[str] = FLAGS) -> Path:
    """The library ``path_in(folder)`` of the first cache folder that can hold it (``cache_dirs()``), compiled there
    from ``sources`` if missing, and owned by this user; raises when none can (``FolderError``), the build fails or
    the owner check does."""
    folders = cache_dirs()
    for i, folder in enumerate(folders):
        path = path_in(folder)
        if not path.exists():
            try:
                build(cc, path, sources, flags)
            except FolderError:  # the next folder, if any
                if i + 1 < len(folders):
                    continue
                raise
        check_owner(path)
        return path
    raise FolderError("no cache folder")  # (not reached: the last folder returns or raises)


def check_owner(path: Path) -> None:
    """Load only a library that this user owns, from a folder no one else may write to."""
    for p in (path.parent, path):
        st = os.stat(p)
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise RuntimeError("%s is owned by another user" % p)
        if st.st_mode & 0o022:
            raise RuntimeError("%s is writable by others" % p)


def _bind(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    fn = lib.pt_stats
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.POINTER(ctypes.c_double)]
    fn.restype = ctypes.c_int
    sfn = lib.pt_stats_strided
    i64p = ctypes.POINTER(ctypes.c_int64)
    sfn.argtypes = [ctypes.c_void_p, ctypes.c_int, i64p, i64p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                    ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
    sfn.restype = ctypes.c_int
    _self_check(fn)
    _self_check_strided(sfn)
    return lib


def _self_check(fn: Any) -> None:
    """A wrong build must not record wrong statistics: check one small array's every figure."""
    values = (ctypes.c_float * 5)(1.0, -2.0, 3.0, 0.5, float("inf"))
    out = (ctypes.c_double * 7)()
    norm = struct.unpack("f", struct.pack("f", math.sqrt(14.25)))[0]  # rounded once to float32
    if fn(ctypes.addressof(values), 4, 0, 0, 1, out) != 0 or list(out) != [3.0, -2.0, 2.5, norm, 0.0, 0.0, 0.0]:
        raise RuntimeError("self-check failed: %s" % list(out))
    if fn(ctypes.addressof(values), 5, 0, 0, 1, out) != 0 or out[2] != float("inf") or out[5] != 1.0:
        raise RuntimeError("self-check failed on inf: %s" % list(out))


def _self_check_strided(fn: Any) -> None:
    """The strided walk: a 2 x 3 float32 array read transposed (column order), against the figures of its
    contiguous copy."""
    values = (ctypes.c_float * 6)(1.0, -2.0, 3.0, 0.5, 4.0, -8.0)
    shape, strides = (ctypes.c_int64 * 2)(3, 2), (ctypes.c_int64 * 2)(1, 3)
    scratch = ctypes.create_string_buffer(64)
    out = (ctypes.c_double * 7)()
    norm = struct.unpack("f", struct.pack("f", math.sqrt(94.25)))[0]
    if fn(ctypes.addressof(values), 2, shape, strides, 0, 0, 1, scratch, out) != 0 \
            or list(out) != [4.0, -8.0, -1.5, norm, 0.0, 0.0, 0.0]:
        raise RuntimeError("self-check of the strided walk failed: %s" % list(out))


def _load() -> Optional[ctypes.CDLL]:
    if os.environ.get(ENV_SWITCH, "").strip() == "0":
        log.info("native statistics kernel off (%s=0): statistics by the framework's reductions", ENV_SWITCH)
        return None
    cc = compiler()
    if cc is None:
        log.warning("native statistics kernel: no C compiler found (set CC); statistics by the framework's "
                    "reductions")
        return None
    try:
        return _bind(cached(cc, lambda folder: library_path(cc, folder)))
    except Exception as exc:  # noqa: BLE001 - any failure means the framework path, said once
        log.warning("native statistics kernel unavailable (%s); statistics by the framework's reductions", exc)
        return None


_library: Once[Optional[ctypes.CDLL]] = Once(_load)


def load() -> Optional[ctypes.CDLL]:
    """The kernel library (built at first use, cached), or None; the outcome is kept for the process."""
    return _library.get()


def reset() -> None:
    """Forget the outcome of ``load()`` (tests)."""
    _library.reset()


__all__ = ["load", "reset", "build", "library_path", "compiler", "cache_dir", "cache_dirs", "FolderError", "ENV_SWITCH", "ENV_DIR",
           "SOURCE", "SOURCES", "HEADERS", "cached", "check_owner", "FLAGS"]

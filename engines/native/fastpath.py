"""The per-entry kernel calls as a CPython extension (``pyext/fastpath.c``: ``host_row``, a tensor's statistics
row; ``crc32_at``, md5's CRC-32), built and cached like the kernel library (``build.py``) and bound to that
library's ``pt_stats`` and ``pt_crc32`` by address (``configure``, ``configure_crc``).

``module()`` returns the extension module, or None when it is off (``PROBE_TUI_NATIVE=0`` or
``PROBE_TUI_FASTPATH=0``), the kernel library is unavailable, Python's headers are missing (a system Python
without its ``-dev`` package), or the build or the load fails: the callers then keep the kernels' ctypes calls,
which give the same values. One log line says why, once. Each caller checks the function it binds before use
(the torch adapter's ``tensor_stats.host_row``, ``crc32.fast_at``).

The extension is built against this interpreter's headers, so its cache key holds the interpreter's version and
ABI as well as the source, the flags and the compiler.
"""

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from engines.native import build
from engines.native.once import Once

log = logging.getLogger("engines.native")

SOURCE = Path(__file__).parent / "pyext" / "fastpath.c"
MODULE = "_probe_fastpath"
ENV_SWITCH = "PROBE_TUI_FASTPATH"
# Portable (no -march: the cache may be shared by nodes); only PyInit visible; a call to an undeclared function (a
# CPython-internal one missing from this version's headers) fails the build instead of loading a broken module.
FLAGS = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-strict-aliasing",
         "-Werror=implicit-function-declaration", "-Werror=int-conversion"]

HostRow = Callable[[Any, bool], Optional[Tuple[Any, ...]]]


def include_dir() -> Optional[str]:
    """This interpreter's C headers, or None when ``Python.h`` is not installed."""
    inc = sysconfig.get_paths().get("include") or ""
    return inc if inc and os.path.exists(os.path.join(inc, "Python.h")) else None


def library_path(cc: str, include: str, folder: Path) -> Path:
    st = os.stat(cc)
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(FLAGS).encode(), include.encode(), sys.version.encode(),
                 str(sys.hexversion).encode(), (sysconfig.get_config_var("EXT_SUFFIX") or "").encode(),
                 sys.platform.encode(), os.uname().machine.encode(),
                 ("%s:%d:%d" % (os.path.realpath(cc), st.st_size, st.st_mtime_ns)).encode()):
        key.update(part)
        key.update(b"\0")
    return folder / ("fastpath-%s.so" % key.hexdigest()[:20])


def _import(path: Path) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    if spec is None:
        raise RuntimeError("cannot load %s" % path)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def configure(module: Any, lib: ctypes.CDLL, codes: Dict[Any, Tuple[int, int]], float32: int, half_from: int,
              threads_from: int, get_num_threads: Callable[[], int], valid_stats: int) -> None:
    """Bind the extension to the kernel library's ``pt_stats`` and the adapter's dtype codes."""
    module.configure(_address(lib.pt_stats), dict(codes), float32, half_from, threads_from, get_num_threads,
                     valid_stats)


def configure_crc(module: Any, lib: ctypes.CDLL) -> None:
    """Bind the extension's ``crc32_at`` to the kernel library's ``pt_crc32``."""
    module.configure_crc(_address(lib.pt_crc32))


def _address(fn: Any) -> int:
    """A ctypes function's address in the loaded library (0 if it has none: the extension refuses it)."""
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


def _load() -> Optional[Any]:
    if os.environ.get(build.ENV_SWITCH, "").strip() == "0" or os.environ.get(ENV_SWITCH, "").strip() == "0":
        return None
    if build.load() is None:  # no kernel to bind (said by build.load)
        return None
    cc = build.compiler()
    include = include_dir()
    if cc is None or include is None:
        log.info("native fast path: %s; the kernels' ctypes calls", "no C compiler" if cc is None
                 else "no Python.h for this interpreter")
        return None
    try:
        return _import(build.cached(cc, lambda folder: library_path(cc, include, folder), sources=(SOURCE,),
                                    flags=(*FLAGS, "-I" + include)))
    except Exception as exc:  # noqa: BLE001 - any failure means the Python path, said once
        log.warning("native fast path unavailable (%s); the kernels' ctypes calls", exc)
        return None


_module: Once[Optional[Any]] = Once(_load)


def module() -> Optional[Any]:
    """The extension module (built at first use, cached; not yet configured), or None; kept for the process."""
    return _module.get()


def reset() -> None:
    """Forget the outcome of ``module()`` (tests)."""
    _module.reset()


__all__ = ["module", "reset", "configure", "configure_crc", "include_dir", "library_path", "SOURCE", "ENV_SWITCH", "HostRow"]

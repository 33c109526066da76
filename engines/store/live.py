"""Stores this process writes through a writer process (``engines.capture.writer_process``): a reader opened in
the same process first waits until the steps already handed over are written, so that a script which reads its
dump right after training (``compare`` on the run it just made) sees every step, as with writes in-process."""

import os
import threading
from typing import Callable, Dict

_lock = threading.Lock()
_writers: Dict[str, Callable[[], None]] = {}  # real path of a rank folder -> wait for its handed-over steps


def _key(folder: "os.PathLike[str] | str") -> str:
    return os.path.realpath(os.fspath(folder))


def register(folder: "os.PathLike[str] | str", drain: Callable[[], None]) -> None:
    with _lock:
        _writers[_key(folder)] = drain


def unregister(folder: "os.PathLike[str] | str") -> None:
    with _lock:
        _writers.pop(_key(folder), None)


def settle(path: "os.PathLike[str] | str") -> None:
    """Wait for this process's writer of ``path`` (a rank folder, or a file in one), if it has one."""
    if not _writers:
        return
    key = _key(path)
    with _lock:
        drain = _writers.get(key) or _writers.get(os.path.dirname(key))
    if drain is not None:
        drain()

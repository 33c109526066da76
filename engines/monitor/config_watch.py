"""Dynamic config: the config file's mtime is polled at each step end; a valid changed config is handed over
(it takes effect at the next step), an invalid one is reported once and ignored. The user's file is only read,
never rewritten (msprobe writes ``dynamic_on: false`` back into it)."""

import logging
import os
from pathlib import Path
from typing import Any, Callable, Optional, Tuple

from engines.safe_fs import PathLike

log = logging.getLogger(__name__)


class ConfigWatcher:
    """``poll()`` returns the new MonitorJob section when the file changed and is valid, else None.

    ``load(path)`` parses a file into a section (default: ``schemas.load_config(path).monitor``);
    ``on_error(message)`` is told once per bad version of the file.
    """

    def __init__(self, path: PathLike, *, load: Optional[Callable[[Path], Any]] = None,
                 on_error: Optional[Callable[[str], None]] = None) -> None:
        self.path = Path(path)
        self._load = load or _load_monitor_section
        self._on_error = on_error or (lambda message: log.warning("probe-tui monitor: %s", message))
        self._stamp = self._read_stamp()
        self._bad_stamp: Optional[Tuple[int, int]] = None
        self.reloads = 0

    def _read_stamp(self) -> Optional[Tuple[int, int]]:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def poll(self) -> Optional[Any]:
        stamp = self._read_stamp()
        if stamp is None or stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            section = self._load(self.path)
        except Exception as exc:  # a broken edit must never stop training
            if stamp != self._bad_stamp:
                self._bad_stamp = stamp
                self._on_error(f"{self.path}: the edited config is not valid and is ignored: {_one_line(exc)}")
            return None
        self.reloads += 1
        return section


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return "; ".join(line.strip() for line in text[:3]) if text else type(exc).__name__


def _load_monitor_section(path: Path) -> Any:
    from schemas import load_config

    job = load_config(str(path))
    section = getattr(job, "monitor", None)
    if section is None:
        raise ValueError(f"task is {getattr(job, 'task', '?')!r}, not monitor")
    return section

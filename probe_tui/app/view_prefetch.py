"""Home reads the run under its cursor while the cursor rests on it, so that ``enter`` opens the view at once.

Opening a run from home is three steps in a row: the detectors find what the folder is (they read files, on a
worker thread), the view's result is read (another thread), then the screen is built and drawn on the UI thread.
The first two cost 12-25 ms of the key on an idle machine (more on a loaded one), and they need nothing the user
has not already chosen: the row under the cursor. Once the cursor has rested on a finished run for
:data:`REST_S`, :class:`ViewPrefetch` detects it and, for a view that shows one result, reads that result on a
worker thread; ``enter`` then pushes the screen with its result in hand (the same screen and message the usual
open builds, ``open_read_first``).

The result must still be the folder's: a run still being written is never read ahead, and the folder's
:func:`signature` (its entries' names, sizes and modification times, and its own) is taken before the read and
compared again as the key opens it; anything changed, or not read yet, and the usual open runs.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Tuple

from textual.screen import Screen
from textual.timer import Timer

from probe_tui.app.openers import detect_kind, factory_for
from probe_tui.app.screens.base import ResultScreen

REST_S = 0.1
"""How long the cursor rests on a row before its view is read ahead (moving through rows reads nothing)."""


def signature(path: Path) -> Optional[Tuple[Any, ...]]:
    """What changes when a folder's contents change: its own modification time and each entry's name, kind, size
    and modification time (None: unreadable). For a file, its own size and time."""
    try:
        own = os.stat(path)
        if not Path(path).is_dir():
            return (own.st_size, own.st_mtime_ns)
        entries = []
        with os.scandir(path) as listing:
            for entry in listing:
                info = entry.stat(follow_symlinks=False)
                entries.append((entry.name, entry.is_dir(follow_symlinks=False), info.st_size, info.st_mtime_ns))
        return (own.st_mtime_ns, tuple(sorted(entries)))
    except OSError:
        return None


@dataclass
class Prefetched:
    """A view read ahead: its folder, what the folder was, its kind, the screen (not mounted) and its result."""

    path: Path
    signature: Tuple[Any, ...]
    kind: Optional[str]
    screen: Optional[Screen] = None
    loaded: Optional[ResultScreen.Loaded] = None

    def ready(self) -> bool:
        """The screen is built and, for a one-result view, its result read."""
        if self.screen is None:
            return False
        return self.loaded is not None or not isinstance(self.screen, ResultScreen)


class ViewPrefetch:
    """Reads ahead the view of the row ``owner`` rests on. ``owner`` is the screen whose timers and workers it
    uses; :meth:`rest` is called as its cursor moves, :meth:`take` as a row is opened."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.current: Optional[Prefetched] = None
        self._timer: Optional[Timer] = None
        self._wanted: Optional[Path] = None
        self.reads = 0
        """Reads ahead finished (tests, the benchmark)."""

    def rest(self, path: Optional[Path], live: bool = False) -> None:
        """The cursor is on ``path`` now (None: on nothing a view opens; ``live``: a run still being written)."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._wanted = None if live else path
        if self._wanted is None:
            return
        if self.current is not None and self.current.path == self._wanted:
            return  # read already, or being read; take() checks it is still the folder's
        self._timer = self.owner.set_timer(REST_S, self._start, name="view-prefetch")

    def forget(self) -> None:
        """Drop what was read ahead (the listing changed, the app moved to another folder)."""
        self.rest(None)
        self.current = None

    def take(self, path: Path) -> Optional[Prefetched]:
        """The view of ``path`` read ahead, if it is ready and its folder unchanged since (then not kept: a screen
        opens once); None otherwise."""
        found, self.current = self.current, None
        if found is None or found.path != path or not found.ready():
            return None
        if signature(path) != found.signature:
            return None
        return found

    # ---- the read, off the UI thread ----------------------------------------------------------------------
    def _start(self) -> None:
        self._timer = None
        path = self._wanted
        if path is None:
            return
        entry = self.current = Prefetched(path, (), None)
        # not exclusive: a cancelled worker fails whoever waits for the app's workers (a later read ahead replaces
        # ``current``, and what an earlier one finds is dropped: each step checks its entry is still ``current``)
        self.owner.run_worker(lambda: self._detect(entry), thread=True, group="view-prefetch", exit_on_error=False,
                              name="reading ahead " + path.name)

    def _detect(self, entry: Prefetched) -> None:
        sig = signature(entry.path)
        kind = detect_kind(entry.path) if sig is not None else None
        self._call_from_thread(self._detected, entry, sig, kind)

    def _detected(self, entry: Prefetched, sig: Optional[Tuple[Any, ...]], kind: Optional[str]) -> None:
        if self.current is not entry:
            return
        if sig is None or kind in (None, "folder"):
            self.current = None
            return
        factory = factory_for(kind)
        try:
            screen = factory(entry.path) if factory is not None else None
        except Exception:  # the usual open names the problem when the user asks for it
            screen = None
        if screen is None:
            self.current = None
            return
        entry.signature, entry.kind, entry.screen = sig, kind, screen
        if isinstance(screen, ResultScreen):
            self.owner.run_worker(lambda: self._read(entry, screen), thread=True, group="view-prefetch-read",
                                  exit_on_error=False, name="reading ahead " + entry.path.name)
        else:
            self.reads += 1

    def _read(self, entry: Prefetched, screen: ResultScreen) -> None:
        loaded = screen.load_result()
        self._call_from_thread(self._read_done, entry, loaded)

    def _read_done(self, entry: Prefetched, loaded: ResultScreen.Loaded) -> None:
        if self.current is entry:
            entry.loaded = loaded
            self.reads += 1

    def _call_from_thread(self, callback: Callable[..., Any], *args: Any) -> None:
        try:
            self.owner.app.call_from_thread(callback, *args)
        except Exception:  # the app is closing
            pass

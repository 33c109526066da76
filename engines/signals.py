"""Deferring a stop signal while the tool finishes a write that must not be cut in half.

A stop (Ctrl-C, SIGTERM, SIGHUP) reaches a headless run as an exception raised wherever the main thread is. Raised
in the middle of a store commit, it would leave some columns of a step written and others not, under a commit row
that claims them all. ``engines.runner`` routes its stop signals through ``deliver``; code that must not be cut
(``StoreWriter.commit``) runs ``with critical():``, and a stop that arrives inside is raised as soon as the block
ends. Pure Python, no framework: the store and the runner both use it.
"""

import threading
from types import TracebackType
from typing import Optional

_state = threading.local()


def _depth() -> int:
    return getattr(_state, "depth", 0)


class critical:
    """``with critical():`` a stop delivered inside waits for the block to end (nested blocks: the outermost)."""

    def __enter__(self) -> None:
        _state.depth = _depth() + 1

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        _state.depth = _depth() - 1
        pending: Optional[BaseException] = getattr(_state, "pending", None)
        if _state.depth == 0 and pending is not None:
            _state.pending = None
            if exc_type is None:
                raise pending


def deliver(exc: BaseException) -> None:
    """Raise ``exc`` now, or when the current critical block ends (a signal handler calls this)."""
    if _depth() > 0:
        if getattr(_state, "pending", None) is None:
            _state.pending = exc
        return
    raise exc

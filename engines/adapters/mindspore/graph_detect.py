"""Compiled execution the PyNative capture cannot see: GRAPH_MODE and ``@jit`` cells.

A cell that runs as a compiled graph (``set_context(mode=GRAPH_MODE)``, or a ``construct`` decorated with
``@jit``) runs no Python between its call and its return: no cell of its own is called through ``__call__``, no
wrapped function runs, and a tensor hook registered on a parameter is compiled into the graph (where the
hook's ``try`` is a syntax error). So the capture calls such a cell untouched, records nothing inside it, and
names it in the summary's notes (docs/MINDSPORE.md "Graph mode").

A jit function that calls the model (a jitted train step) and ``ms.jit(cell)`` called directly never pass through
``Cell.__call__``: the cells are parsed into the graph. They are seen at jit's executor instead
(:func:`install_jit_watch`), which every compiled call made from PyNative goes through.
"""

from typing import Any, Callable, Optional

import mindspore as ms

GRAPH_MODE = "it ran in GRAPH_MODE (set_context(mode=GRAPH_MODE)): a compiled graph runs no Python to record"
JIT_CELL = "its construct is compiled with @jit: a compiled graph runs no Python to record"
JIT_FUNCTION = ("it is compiled with jit: the cells it calls are parsed into the graph, not called, and a "
                "compiled graph runs no Python to record")


def in_graph_mode() -> bool:
    try:
        return bool(ms.get_context("mode") == ms.GRAPH_MODE)
    except Exception:
        return False


def is_jit_cell(cell: Any) -> bool:
    """The cell's ``construct`` is jit's ast wrapper (on the class, or bound on the instance)."""
    construct = cell.__dict__.get("construct") if hasattr(cell, "__dict__") else None
    if construct is None:
        construct = getattr(type(cell), "construct", None)
    construct = getattr(construct, "__func__", construct)
    return bool(getattr(construct, "__wrapped_by_jit__", False))


def graph_reason(cell: Any) -> Optional[str]:
    """Why the cell's call cannot be recorded (it runs compiled), or None (it runs in PyNative)."""
    if in_graph_mode():
        return GRAPH_MODE
    if is_jit_cell(cell):
        return JIT_CELL
    return None


def _executor_class() -> Any:
    """jit's executor class (``mindspore.graph.api`` in 2.10, ``mindspore.common.api`` before), None if absent."""
    for module in ("mindspore.graph.api", "mindspore.common.api"):
        try:
            mod = __import__(module, fromlist=["_JitExecutor"])
        except Exception:
            continue
        cls = getattr(mod, "_JitExecutor", None)
        if cls is not None and "__call__" in cls.__dict__:
            return cls
    return None


def jit_target(executor: Any) -> Optional[str]:
    """What a jit executor runs, for the notes: ``jit function train_step``, ``cell Net (ms.jit(cell))``; None
    for MindSpore's own jit functions (an optimizer's update) and anything unreadable."""
    try:
        fn, obj = executor.fn, executor.obj
        if obj is not None and isinstance(obj, ms.nn.Cell):
            if any(c.__name__ == "Optimizer" for c in type(obj).__mro__):  # nn's and experimental.optim's
                return None
            return "cell %s (ms.jit(cell) called directly) and everything it calls" % type(obj).__name__
        if str(getattr(fn, "__module__", "") or "").startswith("mindspore"):
            return None
        return "jit function %s and everything it calls" % getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))
    except Exception:
        return None


def install_jit_watch(note: Callable[[Any], None]) -> Optional[Callable[[], None]]:
    """Call ``note(executor)`` before every compiled call made from PyNative; returns the function that removes
    the watch (None when this MindSpore has no executor to watch)."""
    cls = _executor_class()
    if cls is None:
        return None
    original = cls.__dict__.get("__call__")
    if original is None or getattr(original, "__probe_jit_watch__", False):
        return None

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            note(self)
        except Exception:
            pass  # the tool never changes the training
        return original(self, *args, **kwargs)

    call.__probe_jit_watch__ = True  # type: ignore[attr-defined]
    cls.__call__ = call

    def remove() -> None:
        if cls.__dict__.get("__call__") is call:
            cls.__call__ = original

    return remove

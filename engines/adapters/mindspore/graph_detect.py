"""Compiled execution the PyNative capture cannot see: GRAPH_MODE and ``@jit`` cells.

A cell that runs as a compiled graph (``set_context(mode=GRAPH_MODE)``, or a ``construct`` decorated with
``@jit``) runs no Python between its call and its return: no cell of its own is called through ``__call__``, no
wrapped function runs, and a tensor hook registered on a parameter is compiled into the graph (where the
hook's ``try`` is a syntax error). So the capture calls such a cell untouched, records nothing inside it, and
names it in the summary's notes (docs/MINDSPORE.md "Graph mode").
"""

from typing import Any, Optional

import mindspore as ms

GRAPH_MODE = "it ran in GRAPH_MODE (set_context(mode=GRAPH_MODE)): a compiled graph runs no Python to record"
JIT_CELL = "its construct is compiled with @jit: a compiled graph runs no Python to record"


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

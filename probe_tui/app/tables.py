"""Filling a DataTable with columns sized from its cells."""

from typing import Any, List, Sequence, Tuple

from rich.text import Text
from textual.widgets import DataTable

MAX_COLUMN_WIDTH = 60


def fill_table(table: DataTable, columns: Sequence[str], rows: List[Tuple[List[Any], str]],
               *, hide_when_empty: bool = True) -> None:
    """Replace the table's columns and rows (``(cells, row key)``). Column widths are computed here from the
    cells: a DataTable left to size its own columns does it when its message queue next goes idle, which can
    come after a repaint (a flicker on screen, a flaky snapshot)."""
    widths = [len(label) for label in columns]
    for cells, _ in rows:
        for n, cell in enumerate(cells):
            text = cell.plain if isinstance(cell, Text) else str(cell)
            widths[n] = max(widths[n], min(len(text), MAX_COLUMN_WIDTH))
    from probe_tui.app.widgets.find_table import FindTable

    table.clear(columns=True)
    for label, width in zip(columns, widths):
        table.add_column(label, width=width, key=label)
    if isinstance(table, FindTable):  # it shows the rows that match its search and filter, and counts them
        table.set_rows([(key, cells) for cells, key in rows])
    else:
        for cells, key in rows:
            table.add_row(*cells, key=key)
    if hide_when_empty:
        table.display = bool(rows)

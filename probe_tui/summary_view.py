"""The one-screen summary printed after a headless job (the status line itself comes from the progress view).

Engines return a summary dict; scalar entries become a key/value grid, ``tables`` (a list of
``{"title", "columns", "rows"}``) become tables cut to ``MAX_ROWS`` rows (or to the spec's ``max_rows``, where its
producer already chose how many: ``parse --limit``, ``compare --top``), and ``error`` shows its last lines.
Values are raw numbers; labels and text come from :mod:`probe_tui.formatting` (``size_bytes`` reads "size 1.5 MB").
"""

from typing import Any, Dict, TextIO

from probe_tui.formatting import format_value, summary_field

MAX_ROWS = 10


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def print_summary(outcome, stream: TextIO) -> None:
    print_mapping(dict(outcome.summary or {}), stream)


def print_mapping(summary: Dict[str, Any], stream: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # A pipe or a log file gets wide lines rather than names folded over five lines.
    width = None if getattr(stream, "isatty", lambda: False)() else 160
    console = Console(file=stream, highlight=False, soft_wrap=False, width=width)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    for key, value in summary.items():
        if key in ("tables", "error", "run_dir") or not _scalar(value):
            continue
        name, text = summary_field(key, value)
        grid.add_row(name.replace("_", " "), text)
    if grid.row_count:
        console.print(grid)

    for spec in summary.get("tables") or []:
        table = Table(title=spec.get("title"), title_justify="left", show_edge=False, pad_edge=False)
        columns = [str(c) for c in spec.get("columns", [])]
        rows = list(spec.get("rows", []))
        cap = int(spec.get("max_rows") or MAX_ROWS)
        cells = [[format_value(cell) for cell in row] for row in rows[:cap]]
        first_max = _first_column_width(console.width, columns, cells)
        for index, column in enumerate(columns):
            # The first column names the row: kept on one line, and on a narrow terminal it gives way (ellipsised)
            # before the others fold.
            table.add_column(column, overflow="ellipsis" if index == 0 else "fold", no_wrap=index == 0,
                             max_width=first_max if index == 0 else None)
        for row in cells:
            table.add_row(*row)
        console.print(table)
        if len(rows) > cap:
            console.print(f"[dim]… {len(rows) - cap} more rows[/]")

    error = summary.get("error")
    if error:
        lines = str(error).rstrip().splitlines()
        console.print(Text("\n".join(lines[-8:]), style="red"))


def _first_column_width(width: int, columns, cells) -> int:
    """What is left for the first column once the others have their natural width (at least 20)."""
    others = 0
    for index in range(1, len(columns)):
        others += max([len(columns[index])] + [len(row[index]) for row in cells if index < len(row)]) + 3
    return max(20, width - others - 1)


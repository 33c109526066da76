"""The one-screen summary printed after a headless job (the status line itself comes from the progress view).

Engines return a summary dict; scalar entries become a key/value grid, ``tables`` (a list of
``{"title", "columns", "rows"}``) become tables cut to ``MAX_ROWS`` rows, and ``error`` shows its last lines.
"""

from typing import Any, Dict, TextIO

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
        grid.add_row(key.replace("_", " "), _format(value))
    if grid.row_count:
        console.print(grid)

    for spec in summary.get("tables") or []:
        table = Table(title=spec.get("title"), title_justify="left", show_edge=False, pad_edge=False)
        for index, column in enumerate(spec.get("columns", [])):
            # The first column names the row: keep it on one line, ellipsised on narrow terminals.
            table.add_column(str(column), overflow="ellipsis" if index == 0 else "fold", no_wrap=index == 0)
        rows = list(spec.get("rows", []))
        for row in rows[:MAX_ROWS]:
            table.add_row(*(_format(cell) for cell in row))
        console.print(table)
        if len(rows) > MAX_ROWS:
            console.print(f"[dim]… {len(rows) - MAX_ROWS} more rows[/]")

    error = summary.get("error")
    if error:
        lines = str(error).rstrip().splitlines()
        console.print(Text("\n".join(lines[-8:]), style="red"))


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)

"""The one-screen summary printed after a headless job (the status line itself comes from the progress view).

Engines return a summary dict; scalar entries become a key/value grid, ``tables`` (a list of
``{"title", "columns", "rows"}``) become tables cut to ``MAX_ROWS`` rows, and ``error`` shows its last lines.
"""

from typing import Any, Dict, TextIO

MAX_ROWS = 10


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def print_summary(outcome, stream: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream, highlight=False, soft_wrap=False)
    summary: Dict[str, Any] = dict(outcome.summary or {})
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
        for column in spec.get("columns", []):
            table.add_column(str(column), overflow="fold")
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

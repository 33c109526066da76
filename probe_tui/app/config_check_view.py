"""The config_check diff in the terminal (``probe-tui config-check compare A B --view``): one table of the
differences, most likely to change the numbers first, and the selected row's reason below it. Keyboard only,
80x24: arrows move, ``q`` quits. A screen of its own, so the main app can push it as it is."""

from typing import Any, Dict, List

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static


class ConfigCheckScreen(Screen):
    """The differences of ``probe_tui.cli_config_check.compare_paths``."""

    BINDINGS = [Binding("q", "app.quit", "Quit", id="config_check.quit")]
    DEFAULT_CSS = """
    ConfigCheckScreen #cc-table { height: 1fr; }
    ConfigCheckScreen #cc-why { height: 3; padding: 0 1; border-top: solid $accent; }
    """

    def __init__(self, result: Dict[str, Any]) -> None:
        super().__init__()
        self.result = result
        self.rows: List[Dict[str, Any]] = list(result.get("differences", []))

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="cc-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="cc-why")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "config-check"
        self.sub_title = "{} differences: {} vs {}".format(len(self.rows), self.result.get("a"), self.result.get("b"))
        table = self.query_one("#cc-table", DataTable)
        many = len(self.result.get("ranks", [])) > 1
        table.add_columns(*(["rank"] if many else []), "category", "key", "A", "B")
        for row in self.rows:
            cells = [row["category"], row["key"], _shown(row["a"]), _shown(row["b"])]
            table.add_row(*([str(row["rank"])] if many else []) + cells)
        self._explain(0)
        table.focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._explain(event.cursor_row)

    def _explain(self, index: int) -> None:
        why = self.query_one("#cc-why", Static)
        if not self.rows:
            why.update("No difference: the two setups agree on everything packed.")
            return
        row = self.rows[max(0, min(index, len(self.rows) - 1))]
        detail = " ({})".format(row["detail"]) if row.get("detail") else ""
        why.update("{}: {}{}".format(row["category"], row["why"], detail))


def _shown(value: Any) -> str:
    if value is None:
        return "(absent)"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ConfigCheckApp(App):
    def __init__(self, result: Dict[str, Any]) -> None:
        super().__init__()
        self.result = result

    def on_mount(self) -> None:
        self.push_screen(ConfigCheckScreen(self.result))


def run_view(result: Dict[str, Any]) -> None:
    ConfigCheckApp(result).run()

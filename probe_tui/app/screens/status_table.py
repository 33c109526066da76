"""A result of judged calls shown as one table and a detail pane: the acc_check result and the online check.
Both list rows with a status and a largest relative error, sort by status (``s``) or error (``e``), search
(``/``), filter by status (``f``) and show the selected row's outputs in the pane; a subclass says how to read
its result, what its rows hold and what the pane shows."""

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from rich.console import RenderableType
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.tables import fill_table
from probe_tui.app.widgets.detail_pane import DetailPane, Prerendered, prerender
from probe_tui.app.widgets.find_table import FindTable, row_index
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.app.widgets.line_label import LineLabel

Row = Tuple[List[Any], str]
DRAWN_KEPT = 256
"""Details kept drawn (a key that comes back to a row copies its lines)."""


class StatusTableScreen(ResultScreen):
    CSS_PATH = "acc_check.tcss"
    FOCUS = "#ac-apis"
    VERDICT = "#ac-verdict"
    HEADING = ""  # the title's first word(s)
    READING = "Reading the result…"
    NOUN = "API"  # what a row is, in the table's title and the empty messages
    COLUMNS: Sequence[str] = ()

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Any = None
        self.sort_by = "status"
        self.shown: List[Dict[str, Any]] = []
        self.selected: Optional[Dict[str, Any]] = None
        self._drawn: Dict[int, Tuple[Dict[str, Any], Prerendered]] = {}
        """id(row) -> (row, its detail drawn for the pane): once per row and pane size, the last :data:`DRAWN_KEPT`
        rows; a new result and a theme switch clear it."""

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble((self.HEADING, "bold"), " · " + relative_text(self.path, self.app.root)),
                     id="ac-title")
        yield Static(Text(self.READING, style="italic"), id="ac-verdict")
        with Horizontal(id="ac-body"):
            with Vertical(id="ac-left"):
                yield LineLabel("", id="ac-table-title", classes="pane-title")
                yield FindTable(id="ac-apis", counter="#ac-table-title", filters=[
                    ("errors", self._status_is("error")), ("warnings", self._status_is("warning")),
                    ("not passed", self._not_passed)])
            with VerticalScroll(id="ac-detail"):
                yield DetailPane("", id="ac-detail-body")
        yield KeyFooter()

    # -- what a subclass provides ----------------------------------------------------------------------------
    def sorted_rows(self) -> List[Dict[str, Any]]:
        """The result's rows in ``self.sort_by`` order."""
        raise NotImplementedError

    def cells(self, row: Dict[str, Any]) -> List[Any]:
        """The table cells of one row (``COLUMNS``)."""
        raise NotImplementedError

    def detail(self, row: Dict[str, Any]) -> RenderableType:
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------------------
    def _status_is(self, status: str) -> Callable[[str], bool]:
        """A filter on the row key (the row's place in ``self.shown``): the row's status is ``status``."""
        return lambda key: self.shown[int(key)]["status"] == status

    def _not_passed(self, key: str) -> bool:
        return self.shown[int(key)]["status"] != "pass"

    def show_verdict(self, verdict: str, errors: int, warnings: int) -> None:
        style = themed("bold error") if errors else themed("bold warning") if warnings else themed("bold success")
        self.query_one("#ac-verdict", Static).update(Text(verdict, style=style))
        self._drawn.clear()  # a row's detail reads the result's outputs too
        self._fill()

    def _fill(self) -> None:
        assert self.result is not None
        self.shown = self.sorted_rows()
        rows: List[Row] = [(self.cells(r), str(n)) for n, r in enumerate(self.shown)]
        table = self.query_one("#ac-apis", FindTable)
        table.title = "{}s by {} · s status · e error".format(
            self.NOUN, "status" if self.sort_by == "status" else "error, largest first")
        fill_table(table, tuple(self.COLUMNS), rows, hide_when_empty=False)
        if table.row_count:
            table.move_cursor(row=0)
            self._select(int(str(table.ordered_rows[0].key.value)))
        else:
            self._no_selection("The check judged no {}.".format(self.NOUN) if not self.shown
                               else "No {} matches the search or filter.".format(self.NOUN))

    def _no_selection(self, text: str) -> None:
        self.selected = None
        self.query_one("#ac-detail-body", DetailPane).show(Text(text, style="italic"))

    @on(DataTable.RowHighlighted, "#ac-apis")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        n = row_index(event)  # the row's place in self.shown (the table may show a search's rows only)
        if n is not None and 0 <= n < len(self.shown):
            self._select(n)

    @on(FindTable.Found)
    def _found(self, event: FindTable.Found) -> None:
        if not event.table.row_count and self.shown:
            self._no_selection("No {} matches the search or filter.".format(self.NOUN))

    def _select(self, n: int) -> None:
        if self.shown[n] is self.selected:  # already shown (a refill, then its cursor's highlight)
            return
        self.selected = self.shown[n]
        pane = self.query_one("#ac-detail-body", DetailPane)
        pane.show(self._detail_drawn(self.selected, pane))

    def _detail_drawn(self, row: Dict[str, Any], pane: DetailPane) -> Any:
        """The row's detail drawn once at the pane's size: Textual would draw a Rich group three times on an
        update (to measure it, to lay the screen out when its height changes, to paint it), ~60 ms of CPU on a
        page key; the lines drawn here are only copied. Kept per row, for the keys that come back to it."""
        room = pane.room()
        kept = self._drawn.get(id(row))
        if kept is not None and kept[0] is row and room is not None and kept[1].fits == room[:2]:
            return kept[1]
        drawn = prerender(self.detail(row), room)
        if isinstance(drawn, Prerendered):  # (not when the pane is not laid out yet)
            self._drawn.pop(id(row), None)
            self._drawn[id(row)] = (row, drawn)
            if len(self._drawn) > DRAWN_KEPT:
                del self._drawn[next(iter(self._drawn))]  # the oldest drawn
        return drawn

    def theme_changed(self) -> None:
        self._drawn.clear()  # drawn in the old theme's colours (the pane's own lines are recoloured)

    def action_sort_status(self) -> None:
        self._sort("status")

    def action_sort_error(self) -> None:
        self._sort("error")

    def _sort(self, by: str) -> None:
        if self.result is not None and self.sort_by != by:
            self.sort_by = by
            self._fill()

    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        self.dismiss()

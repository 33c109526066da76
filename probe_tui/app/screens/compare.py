"""The compare browser: the results table (sortable, filterable, virtual), the first-divergence list and the model
hierarchy tree of one compare result, with a detail pane for the row, suspect or node under the cursor.

Reading happens in thread workers that post typed messages (:class:`CompareScreen.Loaded`, ``ViewReady``,
``DetailReady``, ``TreeReady``); the UI thread only swaps the table's view index and repaints what is visible.
"""

import asyncio
from pathlib import Path
from typing import Any, Dict, Optional, Set

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Input, Label, Static, TabbedContent, TabPane, Tree

from engines.compare.verdicts import VERDICTS
from probe_tui.app.actions import bindings_for
from probe_tui.app.data.compare_result import SORT_LABELS, CompareResult, ResultView, of_rank
from probe_tui.app.screens.base import AppScreen
from probe_tui.app.screens.compare_detail import node_detail, row_detail, suspect_detail
from probe_tui.app.screens.compare_finding import TAB_AFTER_VIEW_S, CompareFinding  # noqa: F401 (tests read it here)
from probe_tui.app.screens.compare_ranks import CompareRanks
from probe_tui.app.screens.compare_rows import (
    DIVERGENCE_COLUMNS,
    DivergenceRows,
    ResultRows,
    mode_metrics,
    no_match_text,
    number_width,
)
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.widgets.detail_pane import DetailPane, DetailScroll, prerender
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.app.widgets.presize import presize
from probe_tui.app.widgets.rank_bar import RankBar
from probe_tui.app.widgets.result_tree import NodeRef, ResultTree
from probe_tui.app.widgets.virtual_table import VirtualTable
from probe_tui.formatting import count_text

DETAIL_DELAY_S = 0.08
DETAIL_CACHE = 16
"""Details kept drawn (the last ones shown): a tab switch back, or the cursor back on a row, shows one at once."""
TABS = {"results": "tab-results", "divergence": "tab-divergence", "tree": "tab-tree"}


class CompareScreen(CompareFinding, CompareRanks, AppScreen):
    SCOPE = "compare"
    CSS_PATH = "compare.tcss"
    BINDINGS = bindings_for("compare")

    class Loaded(Message):
        def __init__(self, data: Optional[CompareResult], view: Optional[ResultView], error: str = "") -> None:
            super().__init__()
            self.data, self.view, self.error = data, view, error

    class ViewReady(Message):
        def __init__(self, view: Optional[ResultView], keep_row: Optional[int], error: str = "") -> None:
            super().__init__()
            self.view, self.keep_row, self.error = view, keep_row, error

    class DetailReady(Message):
        def __init__(self, key: Any, renderable: Any, shown: Any) -> None:
            super().__init__()
            self.key, self.renderable, self.shown = key, renderable, shown  # shown: drawn for the pane

    class DivergenceReady(Message):
        def __init__(self, table: Dict[str, Any]) -> None:
            super().__init__()
            self.table = table

    class TreeReady(Message):
        def __init__(self, index: Any) -> None:
            super().__init__()
            self.index = index

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.data: Optional[CompareResult] = None
        self.view: Optional[ResultView] = None
        self.spec: Dict[str, Any] = {"verdict_filter": "all", "search": "", "sort": "order", "descending": False,
                                     "rank": None}
        """The view last asked for (the one on screen may still be computing)."""
        self.divergence: Optional[Dict[str, Any]] = None
        """The ranking shown: every entry, or the shown rank's."""
        self.divergence_all: Optional[Dict[str, Any]] = None
        self.init_ranks()
        self.tree_ready = False
        self._detail_key: Any = None
        self._view_applied: Optional[asyncio.Event] = None
        self._detail_timer: Optional[Timer] = None
        self.detail_renderable: Any = None
        """What the detail pane shows (a rich renderable)."""
        self._tab_handled: Optional[str] = None
        self._tab_after_view: Optional[Timer] = None
        """Set while the results tab waits for the view or the detail on its way (``action_goto_rows``)."""
        self._tab_waits: Set[str] = set()
        """What that tab still waits for: ``view``, ``detail``."""
        self._reading_ahead: Set[Any] = set()
        """Detail keys read ahead (``read_ahead``), on their way."""
        self._details: Dict[Any, Any] = {}
        """Key -> (theme, renderable, drawn for the pane): the last details read (``DETAIL_CACHE``)."""

    # ---- layout -------------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="cmp-title-bar"):
            yield Static(Text.assemble(("Compare", "bold"), " · " + relative_text(self.path, self.app.root)),
                         id="cmp-title")
            yield Static("", id="cmp-counts")
        yield RankBar()
        with Horizontal(id="cmp-body"):
            with TabbedContent(id="cmp-tabs"):
                with TabPane("1 Results", id=TABS["results"]):
                    yield VirtualTable(id="results")
                    yield Label("", id="results-status")
                with TabPane("2 First divergence", id=TABS["divergence"]):
                    yield VirtualTable(id="divergence")
                with TabPane("3 Model tree", id=TABS["tree"]):
                    yield ResultTree(id="tree")
            with DetailScroll(id="cmp-detail"):
                yield DetailPane("", id="detail-body")
        yield Input(placeholder="search names: text, a glob (*.softmax.*) or re:regex; enter applies, empty clears",
                    id="cmp-search")
        yield KeyFooter()

    @property
    def results_table(self) -> VirtualTable:
        return self.query_one("#results", VirtualTable)

    @property
    def divergence_table(self) -> VirtualTable:
        return self.query_one("#divergence", VirtualTable)

    def on_mount(self) -> None:
        self.query_one("#cmp-search", Input).display = False
        self.results_table.empty_text = "Reading the result…"
        self.divergence_table.empty_text = "Reading the ranking…"
        self.results_table.focus()
        self._load()

    # ---- loading ------------------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="cmp-load", exit_on_error=False)
    def _load(self) -> None:
        try:
            data = CompareResult(self.path)
            view = data.view()
        except Exception as exc:
            self.post_message(self.Loaded(None, None, f"{self.path}: cannot read the compare result: {exc}"))
            return
        self.post_message(self.Loaded(data, view))

    @on(Loaded)
    def _loaded(self, message: "CompareScreen.Loaded") -> None:
        if message.data is None:
            self.results_table.empty_text = message.error
            self.results_table.refresh()
            self.notify(message.error, severity="error", title="Compare")
            return
        self.data = message.data
        self._show_counts()
        self.setup_ranks(self.data.ranks())
        if self.rank is not None:  # a rank chosen earlier for this result
            self.spec["rank"] = self.rank
            self._make_view(dict(self.spec), None)
        self._set_view(message.view, None)
        if not self.data.n_rows:
            self.results_table.empty_text = "This result has no rows."
        self.call_after_refresh(self._load_divergence)  # after the first paint of the rows

    def _show_counts(self) -> None:
        data = self.data
        counts = data.verdict_counts()
        text = Text.assemble("{} rows: ".format(count_text(data.n_rows)),
                             ("{:,} error".format(counts["error"]), themed("error")), " · ",
                             ("{:,} warning".format(counts["warning"]), themed("warning")), " · ",
                             ("{:,} unmatched".format(counts["unmatched"]), themed("muted")))
        self.query_one("#cmp-counts", Static).update(text)

    def on_unmount(self) -> None:
        if self.data is not None:
            self.data.close()

    # ---- the results view ---------------------------------------------------------------------------------
    def _name_width(self) -> int:
        width = self.results_table.scrollable_content_region.width or self.app.size.width
        data = self.data
        metrics = len(mode_metrics(data)) if data else 3
        # every column but the last has a separator: #, name, verdict, metrics (where: 7 + 1)
        fixed = number_width(data.n_rows if data else 0) + 2 + 10 + metrics * 10 + (8 if data and data.multi_piece
                                                                                      else 0)
        return max(30, min(72, width - fixed))

    def _set_view(self, view: ResultView, keep_row: Optional[int]) -> None:
        self.view = view
        rows = ResultRows(self.data, view, self._name_width())
        cursor = None
        if keep_row is not None:
            cursor = view.position_of(keep_row)
        table = self.results_table
        if self.data is not None and self.data.n_rows and not len(view):
            table.empty_text = no_match_text(view)
        with self.app.batch_update():
            table.set_source(rows.columns(), rows, cursor=cursor if cursor is not None else 0)
            self._show_status()
        if self._view_applied is not None:
            self._view_applied.set()
        self._row_changed()

    def _show_status(self) -> None:
        view, data = self.view, self.data
        if view is None or data is None:
            return
        parts = [data.mode + " mode", "filter: " + view.verdict_filter, "sort: " + SORT_LABELS.get(view.sort, view.sort) +
                 (" (reversed)" if view.descending else "")]
        if view.search:
            parts.append("search: " + view.search)
        if view.rank is not None:
            parts.append("rank {}".format(view.rank))
        parts.append("{} of {} rows".format(count_text(len(view)), count_text(data.n_rows)))
        if len(view.error_positions):
            word = VERDICTS[view.problem_level]
            parts.append("{:,} {}{} · n next".format(len(view.error_positions), word,
                                                    "s" if word != "unmatched" else ""))
        else:
            parts.append("no problem here")
        table = self.results_table
        if table.virtual_size.width > table.scrollable_content_region.width > 0:
            parts.append("→ more columns")  # the table scrolls sideways to them
        self.query_one("#results-status", Label).update(Text("  ·  ".join(parts), style="dim"))

    def request_view(self, **changes: Any) -> None:
        """Recompute the view (filter, search, sort) in a worker; the cursor stays on its row when it can."""
        if self.data is None or self.view is None:
            return
        self.spec.update(changes)  # keys pressed quickly build on each other, not on the view on screen
        self._make_view(dict(self.spec), self.current_row())

    async def apply_view(self, **changes: Any) -> None:
        """``request_view`` and wait until the new view is on screen (benchmarks, tests)."""
        self._view_applied = asyncio.Event()
        self.request_view(**changes)
        await self._view_applied.wait()
        self._view_applied = None

    @work(thread=True, exclusive=True, group="cmp-view", exit_on_error=False)
    def _make_view(self, spec: Dict[str, Any], keep_row: Optional[int]) -> None:
        try:
            view = self.data.view(**spec)
        except ValueError as exc:
            self.post_message(self.ViewReady(None, keep_row, str(exc)))
            return
        self.post_message(self.ViewReady(view, keep_row))

    @on(ViewReady)
    def _view_ready(self, message: "CompareScreen.ViewReady") -> None:
        if message.view is None:
            if self.view is not None:  # keep asking for what is on screen
                self.spec["search"] = self.view.search
            self.notify(message.error, severity="error", title="Search")
            if self._view_applied is not None:
                self._view_applied.set()
            self._tab_part_ready("view")
            return
        self._set_view(message.view, message.keep_row)
        self._tab_part_ready("view")
        if not len(message.view):
            self.notify("No row matches; f changes the filter, / the search.", timeout=4)

    def current_row(self) -> Optional[int]:
        table = self.results_table
        if self.view is None or not len(self.view):
            return None
        return int(self.view.rows[min(table.cursor_row, len(self.view) - 1)])

    # ---- detail pane --------------------------------------------------------------------------------------
    @on(VirtualTable.CursorMoved, "#results")
    def _results_cursor(self, _: VirtualTable.CursorMoved) -> None:
        self._row_changed()

    def _row_changed(self, at_once: bool = False) -> None:
        row = self.current_row()
        if row is not None and self._active_tab() == "results":
            self._show_detail(("row", row), at_once=at_once)

    def _show_detail(self, key: Any, at_once: bool = False) -> None:
        """Show the detail of ``key`` once the cursor rests (a held arrow key reads no rows); ``at_once`` (a tab
        switch) shows one drawn before in the same frame as the tab (a layout less, no worker)."""
        if key == self._detail_key or self.data is None:
            return
        self._detail_key = key
        if self._detail_timer is not None:
            self._detail_timer.stop()
        room = self.query_one("#detail-body", DetailPane).room()
        if at_once and self._show_drawn(key):
            return
        if key in self._reading_ahead:  # on its way: shown as it arrives
            return
        self._detail_timer = self.set_timer(DETAIL_DELAY_S, lambda: self._show_drawn(key) or self._load_detail(key, room))

    def _show_drawn(self, key: Any) -> bool:
        """Show ``key``'s detail if it was drawn before (for this theme); False if it must be read."""
        drawn = self._details.get(key)
        if drawn is None or drawn[0] != self.app.theme or key != self._detail_key:
            return False
        self.detail_renderable = drawn[1]
        self.query_one("#detail-body", DetailPane).show(drawn[2])  # drawn for another pane size: drawn again
        return True

    @work(thread=True, exclusive=True, group="cmp-detail", exit_on_error=False)
    def _load_detail(self, key: Any, room: Any) -> None:
        self.post_message(self._read_detail(key, room))

    def read_ahead(self, key: Any) -> bool:
        """Read ``key``'s detail now, for the tab a key shows next (no wait for the cursor's rest); False when it
        is drawn already or on its way."""
        drawn = self._details.get(key)
        if (drawn is not None and drawn[0] == self.app.theme) or key in self._reading_ahead or self.data is None:
            return False
        self._reading_ahead.add(key)
        self._read_ahead(key, self.query_one("#detail-body", DetailPane).room())
        return True

    @work(thread=True, exit_on_error=False, group="cmp-ahead")
    def _read_ahead(self, key: Any, room: Any) -> None:
        try:
            message = self._read_detail(key, room)
        except Exception:
            self.app.call_from_thread(self._ahead_failed, key)
            raise
        self.post_message(message)

    def _ahead_failed(self, key: Any) -> None:
        self._reading_ahead.discard(key)
        self._tab_part_ready("detail")

    @work(thread=True, exclusive=True, group="cmp-predraw", exit_on_error=False)
    def _predraw_detail(self, key: Any, room: Any) -> None:
        """Read ``key``'s detail ahead (kept with the details drawn): a switch to its tab then shows it at once."""
        divergence = self.divergence
        message = self._read_detail(key, room)
        if self.divergence is divergence:  # the same ranking ("suspect" keys are places in it)
            self.post_message(message)

    def _read_detail(self, key: Any, room: Any) -> "CompareScreen.DetailReady":
        data = self.data
        kind = key[0]
        if kind == "row":
            renderable = row_detail(data.row(key[1]), data.mode)
        elif kind == "suspect":
            table = self.divergence
            first = int(table["first_row"][key[1]])
            row = data.row(data.worst_row_of_record(first)) if 0 <= first < data.n_rows else None
            renderable = suspect_detail(table, key[1], row, data.mode)
        else:
            index = data.tree()
            node = key[1]
            first = index.first_row(node)
            row = data.row(first) if 0 <= first < data.n_rows else None
            columns = {c: v[node] for c, v in index.columns.items()}
            renderable = node_detail(columns, index.name(node), row, data.mode)
        return self.DetailReady(key, renderable, prerender(renderable, room))

    @on(DetailReady)
    def _detail_ready(self, message: "CompareScreen.DetailReady") -> None:
        ahead = message.key in self._reading_ahead
        self._reading_ahead.discard(message.key)
        self._details.pop(message.key, None)
        self._details[message.key] = (self.app.theme, message.renderable, message.shown)
        while len(self._details) > DETAIL_CACHE:
            self._details.pop(next(iter(self._details)))
        if message.key == self._detail_key:
            self.detail_renderable = message.renderable
            self.query_one("#detail-body", DetailPane).show(message.shown)
        if ahead:  # the results tab that waits for it (``action_goto_rows``) shows with it
            self._tab_part_ready("detail")

    # ---- divergence and tree ------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="cmp-divergence", exit_on_error=False)
    def _load_divergence(self) -> None:
        self.post_message(self.DivergenceReady(self.data.divergence()))

    @on(DivergenceReady)
    def _divergence_ready(self, message: "CompareScreen.DivergenceReady") -> None:
        self.divergence_all = message.table
        self._show_divergence()
        self.show_rank_bar()
        if self.tree_ready:
            self._reload_tree()
        self.call_after_refresh(self._presize_tabs)

    def _presize_tabs(self) -> None:
        """Lay the hidden tabs out and read the ranking's first detail while the view is idle: the first switch to
        the ranking then shows it and its detail in its own layout (``widgets/presize.py``)."""
        tabs = self.query_one("#cmp-tabs", TabbedContent)
        shown = self.query_one("#" + tabs.active, TabPane) if tabs.active else None
        if shown is None:
            return
        for pane in self.query(TabPane):
            if pane is not shown:
                presize(pane, shown)
        if not self.tree_ready and self.data is not None:
            self._load_tree()  # the tree tab's first rows (laid out in turn once they are in)
        table = self.divergence_table
        if self.divergence is not None and table.row_count and ("suspect", table.cursor_row) not in self._details:
            room = self.query_one("#detail-body", DetailPane).room()
            self._predraw_detail(("suspect", table.cursor_row), room)  # the ranking tab's first detail

    def _show_divergence(self) -> None:
        self.divergence = of_rank(self.divergence_all, self.rank)
        self._details = {k: v for k, v in self._details.items() if k[0] != "suspect"}  # keyed by place in it
        table = self.divergence_table
        table.empty_text = ("No entry of rank {} in the ranking.".format(self.rank) if self.rank is not None and
                            self.divergence_all is not None and len(self.divergence_all.get("record", ())) else
                            "No ranking in this result (first_divergence was off, or nothing matched).")
        table.set_source(DIVERGENCE_COLUMNS, DivergenceRows(self.divergence), cursor=0)
        if self._active_tab() == "divergence":
            self._detail_key = None  # other entries under the cursor now
            self._suspect_changed()

    def rank_changed(self) -> None:
        """Show the chosen rank's rows, ranking entries and tree pieces (every rank's for None)."""
        if self.data is None:
            return
        self.request_view(rank=self.rank)
        if self.divergence_all is not None:
            self._show_divergence()
        if self.tree_ready:
            self._reload_tree()

    def _reload_tree(self) -> None:
        tree = self.query_one("#tree", ResultTree)
        if tree.index is not None:
            tree.load(tree.index, self.rank, self.tree_marks())

    @on(VirtualTable.CursorMoved, "#divergence")
    def _suspect_cursor(self, _: VirtualTable.CursorMoved) -> None:
        self._suspect_changed()

    def _suspect_changed(self, at_once: bool = False) -> None:
        if self._active_tab() == "divergence" and self.divergence is not None and self.divergence_table.row_count:
            self._show_detail(("suspect", self.divergence_table.cursor_row), at_once=at_once)

    @on(VirtualTable.Selected, "#divergence")
    def _suspect_selected(self, _: VirtualTable.Selected) -> None:
        self.action_goto_rows()

    @work(thread=True, exclusive=True, group="cmp-tree", exit_on_error=False)
    def _load_tree(self) -> None:
        self.post_message(self.TreeReady(self.data.tree()))

    @on(TreeReady)
    def _tree_ready(self, message: "CompareScreen.TreeReady") -> None:
        tree = self.query_one("#tree", ResultTree)
        tree.load(message.index, self.rank, self.tree_marks())
        self.tree_ready = True
        if self._active_tab() == "tree":
            tree.focus()
        else:
            self.call_after_refresh(self._presize_tabs)

    @on(Tree.NodeHighlighted, "#tree")
    def _node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        ref = event.node.data
        if isinstance(ref, NodeRef) and ref.node >= 0:
            self._show_detail(("node", ref.node))

    # ---- tabs ---------------------------------------------------------------------------------------------
    def _active_tab(self) -> str:
        active = self.query_one("#cmp-tabs", TabbedContent).active
        return next((k for k, v in TABS.items() if v == active), "results")

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, _: TabbedContent.TabActivated) -> None:
        self._tab_changed()

    def _tab_changed(self) -> None:
        """Focus the tab shown and show its detail (once per switch: the key's action, then the message)."""
        tab = self._active_tab()
        if tab == self._tab_handled:
            return
        self._tab_handled = tab
        self._cancel_tab_after_view()  # a tab chosen another way (a click) wins too
        if tab == "results":
            self.results_table.focus()
            self._detail_key = None
            self._row_changed(at_once=True)
        elif tab == "divergence":
            self.divergence_table.focus()
            self._detail_key = None
            self._suspect_changed(at_once=True)
        else:
            tree = self.query_one("#tree", ResultTree)
            tree.focus()
            if not self.tree_ready and self.data is not None:
                self._load_tree()

    def _cancel_tab_after_view(self) -> None:
        self._tab_waits = set()
        if self._tab_after_view is not None:
            self._tab_after_view.stop()
            self._tab_after_view = None

    def _tab_part_ready(self, part: str) -> None:
        """The view or the detail the results tab waits for arrived: the tab shows once both have."""
        self._tab_waits.discard(part)
        if not self._tab_waits:
            self._show_tab_after_view()

    def _show_tab_after_view(self) -> None:
        """The results tab that waited for the view and the detail (``action_goto_rows``): now, or when the wait ran
        out."""
        if self._tab_after_view is not None:
            self.action_show_tab("results")

    def action_show_tab(self, tab: str) -> None:
        # the tab bar's underline would slide to the new tab: ~15 frames of repaints, as much CPU as the switch
        self._cancel_tab_after_view()  # this key's tab, not the one that waited
        app = self.app
        level, app.animation_level = app.animation_level, "none"
        try:
            self.query_one("#cmp-tabs", TabbedContent).active = TABS[tab]
        finally:
            app.animation_level = level
        self._tab_changed()  # now, not on TabActivated: a detail drawn before shows in the tab's first layout

    # ---- finding: the search field (the other finding keys: CompareFinding) ----------------------------
    def action_search(self) -> None:
        if self._active_tab() != "results":
            self.action_show_tab("results")
        search = self.query_one("#cmp-search", Input)
        search.value = self.spec["search"]
        search.display = True
        search.focus()

    @on(Input.Submitted, "#cmp-search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        self._close_search()
        self.request_view(search=event.value.strip())

    def _close_search(self) -> None:
        search = self.query_one("#cmp-search", Input)
        search.display = False
        self.results_table.focus()

    def action_toggle_detail(self) -> None:
        detail = self.query_one("#cmp-detail")
        detail.display = not detail.display
        if self.view is not None and self.data is not None:
            self.call_after_refresh(self._set_view, self.view, self.current_row())

    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        search = self.query_one("#cmp-search", Input)
        if search.display:
            self._close_search()
            return
        self.dismiss()

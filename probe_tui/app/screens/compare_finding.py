"""The compare browser's finding keys: the next/previous error row, the verdict filter and the sort, and the
results row of the suspect or tree node under the cursor. Mixed into
:class:`~probe_tui.app.screens.compare.CompareScreen`, which holds the data, the view and the tables (its search
field, whose handler Textual must find on the screen's own class, stays there)."""

from typing import Any

from probe_tui.app.data.compare_result import FILTER_CYCLE
from probe_tui.app.widgets.result_tree import NodeRef, ResultTree

TAB_AFTER_VIEW_S = 0.25
"""How long enter on a suspect or node waits for the view with its row (when the view leaves the row out) and for
the row's detail (when it was not drawn before) before it shows the results tab anyway (with what it had)."""


class CompareFinding:
    data: Any
    view: Any
    spec: Any
    divergence: Any
    rank: Any
    _tab_after_view: Any
    _tab_waits: Any

    def _jump_to_error(self, backwards: bool) -> None:
        if self.view is None:
            return
        table = self.results_table
        position = self.view.next_error(table.cursor_row, backwards)
        if position is not None:  # before the tab shows: it shows with this row's detail, not the last one's
            table.move_cursor(position)
        if self._active_tab() != "results":
            self.action_show_tab("results")
        if position is None:
            self.notify("No error, warning or unmatched row among the rows shown.", timeout=3)

    def action_next_error(self) -> None:
        self._jump_to_error(False)

    def action_previous_error(self) -> None:
        self._jump_to_error(True)

    def action_cycle_filter(self) -> None:
        current = self.spec["verdict_filter"]
        position = FILTER_CYCLE.index(current) if current in FILTER_CYCLE else 0
        self.request_view(verdict_filter=FILTER_CYCLE[(position + 1) % len(FILTER_CYCLE)])

    def action_cycle_sort(self) -> None:
        if self.data is None:
            return
        sorts = list(self.data.sorts())
        position = sorts.index(self.spec["sort"]) if self.spec["sort"] in sorts else 0
        self.request_view(sort=sorts[(position + 1) % len(sorts)], descending=False)

    def action_reverse_sort(self) -> None:
        self.request_view(descending=not self.spec["descending"])

    def action_goto_rows(self) -> None:
        """The results row of the suspect or tree node under the cursor."""
        if self.data is None:
            return
        tab = self._active_tab()
        row = -1
        if tab == "divergence" and self.divergence is not None and self.divergence_table.row_count:
            row = int(self.divergence["first_row"][self.divergence_table.cursor_row])
            if 0 <= row < self.data.n_rows:
                row = self.data.worst_row_of_record(row)
        elif tab == "tree":
            node = self.query_one("#tree", ResultTree).cursor_node
            if node is not None and isinstance(node.data, NodeRef) and node.data.node >= 0:
                row = self.data.tree().first_row(node.data.node)
        else:
            return
        if row < 0:
            self.notify("No result row belongs to this line.", timeout=3)
            return
        position = self.view.position_of(row) if self.view is not None else None
        # the tab shows once, with the view that holds the row and the row's detail: both are read now, together
        self._cancel_tab_after_view()
        waits = set()
        if self.read_ahead(("row", row)):
            waits.add("detail")
        if position is None:  # filtered out: show everything (of its rank) in dump order, then go there
            self.spec = {"verdict_filter": "all", "search": "", "sort": "order", "descending": False,
                         "rank": self.rank}
            self._make_view(dict(self.spec), row)
            waits.add("view")
        else:  # before the tab shows: it shows with this row's detail, not the detail of the row it was on
            self.results_table.move_cursor(position)
        if not waits:
            self.action_show_tab("results")
            return
        self._tab_waits = waits
        self._tab_after_view = self.set_timer(TAB_AFTER_VIEW_S, self._show_tab_after_view)

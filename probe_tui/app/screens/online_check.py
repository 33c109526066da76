"""The online check of a statistics/tensor run (docs/ACC_CHECK.md, "Online check"): every judged call, forward
and backward, of every rank and step, with its status and largest relative error; sortable by status (``s``) or
by error (``e``), searchable (``/``) and filtered by status (``f``); the detail pane shows the call's outputs
(a backward's are the gradients w.r.t. its inputs) with their metrics and reasons. ``d`` opens the run's dump.

Opened for a run or rank folder holding ``online_check`` stores (``rank<R>/online_check.h5``)."""

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Label, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.screens.acc_check import DETAIL_METRICS, STATUS_ORDER, STATUS_STYLE, sort_apis
from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.tables import fill_table
from probe_tui.app.widgets.find_table import FindTable, row_index
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.formatting import number_text

KIND = "online_check"


def online_rank_dirs(path: Path) -> Dict[int, Path]:
    from probe_tui.app.data.check_results import rank_dirs_with

    return rank_dirs_with(Path(path), KIND)


def is_online_check_run(path: Path) -> bool:
    """A run or rank folder with an online check's store."""
    return bool(online_rank_dirs(path))


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


class OnlineCheckResult:
    """The judged calls (``rank``, ``step``, ``name``, ``api``, worst ``status``, largest ``error``) and their
    outputs."""

    def __init__(self, rows_by_rank: Dict[int, List[Dict[str, Any]]]) -> None:
        self.calls: List[Dict[str, Any]] = []
        self.outputs: Dict[str, List[Dict[str, Any]]] = {}
        for rank in sorted(rows_by_rank):
            for row in rows_by_rank[rank]:
                key = "{}/{}/{}".format(rank, row["step"], row["name"])
                out = dict(row)
                try:
                    out.update(json.loads(row.get("metrics") or "{}"))
                except ValueError:
                    pass
                if key not in self.outputs:
                    self.outputs[key] = []
                    self.calls.append({"key": key, "rank": rank, "step": int(row["step"]), "name": str(row["name"]),
                                       "api": str(row["api"]), "status": "pass", "error": math.nan})
                self.outputs[key].append(out)
        for call in self.calls:
            outs = self.outputs[call["key"]]
            call["status"] = min((str(o["status"]) for o in outs), key=lambda s: STATUS_ORDER.get(s, 9))
            errors = [float(o["max_rel_err"]) for o in outs if _finite(o.get("max_rel_err"))]
            call["error"] = max(errors) if errors else math.nan

    def count(self, status: str) -> int:
        return sum(1 for c in self.calls if c["status"] == status)

    @property
    def failing_apis(self) -> List[str]:
        return sorted({c["api"] for c in self.calls if c["status"] == "error"})


def read_online(path: Path) -> OnlineCheckResult:
    from engines.acc_check.online import read_checks

    return OnlineCheckResult({rank: read_checks(d) for rank, d in online_rank_dirs(path).items()})


def call_detail(call: Dict[str, Any], outputs: List[Dict[str, Any]]) -> Group:
    status = str(call["status"])
    backward = call["name"].endswith(".backward")
    parts: List[Any] = [
        Text(call["name"], style="bold"),
        Text.assemble((status, themed(STATUS_STYLE.get(status, ""))), "  rank {} · step {} · {}".format(
            call["rank"], call["step"], "gradients w.r.t. its inputs" if backward else "its outputs"))]
    for out in outputs:
        ostatus = str(out["status"])
        parts.append(Text(""))
        parts.append(Text.assemble((str(out["output"]), "bold"), "  ", (ostatus, themed(STATUS_STYLE.get(ostatus, "")))))
        parts.append(Text("{} vs {} {} · {} standard".format(out.get("dtype", ""), out.get("bench_dtype", ""),
                                                              out.get("shape", ""), out.get("standard", "") or "—"),
                          style="dim"))
        if out.get("message"):
            parts.append(Text(str(out["message"]), style="italic"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim")
        grid.add_column()
        for key, label in DETAIL_METRICS:
            if _finite(out.get(key)):
                grid.add_row(label, number_text(float(out[key]), 6))
        if grid.row_count:
            parts.append(grid)
    return Group(*parts)


class OnlineCheckScreen(ResultScreen):
    SCOPE = "onlinecheck"
    CSS_PATH = "acc_check.tcss"
    BINDINGS = bindings_for("onlinecheck")

    FOCUS = "#ac-apis"
    VERDICT = "#ac-verdict"
    TITLE = "online check"
    READ_ERROR = "{path}: cannot read the online check: {exc}"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Optional[OnlineCheckResult] = None
        self.sort_by = "status"
        self.shown: List[Dict[str, Any]] = []
        self.selected: Optional[Dict[str, Any]] = None

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("online check", "bold"), " · " + relative_text(self.path, self.app.root)),
                     id="ac-title")
        yield Static(Text("Reading the online check…", style="italic"), id="ac-verdict")
        with Horizontal(id="ac-body"):
            with Vertical(id="ac-left"):
                yield Label("", id="ac-table-title", classes="pane-title")
                yield FindTable(id="ac-apis", counter="#ac-table-title", filters=[
                    ("errors", self._status_is("error")), ("warnings", self._status_is("warning")),
                    ("not passed", self._not_passed)])
            with VerticalScroll(id="ac-detail"):
                yield Static("", id="ac-detail-body")
        yield KeyFooter()

    def _status_is(self, status: str):
        return lambda key: self.shown[int(key)]["status"] == status

    def _not_passed(self, key: str) -> bool:
        return self.shown[int(key)]["status"] != "pass"

    def read(self) -> OnlineCheckResult:
        return read_online(self.path)

    def show(self, result: OnlineCheckResult) -> None:
        self.result = result
        errors, warnings = result.count("error"), result.count("warning")
        failing = result.failing_apis
        verdict = "{} calls judged: {} error, {} warning, {} pass".format(
            len(result.calls), errors, warnings, result.count("pass"))
        if failing:
            verdict += " · failing: " + ", ".join(failing)
        style = themed("bold error") if errors else themed("bold warning") if warnings else themed("bold success")
        self.query_one("#ac-verdict", Static).update(Text(verdict, style=style))
        self._fill()

    def _fill(self) -> None:
        assert self.result is not None
        self.shown = sort_apis(self.result.calls, self.sort_by)
        rows = []
        for n, c in enumerate(self.shown):
            status = str(c["status"])
            rows.append(([Text(status, style=themed(STATUS_STYLE.get(status, ""))),
                          Text(c["name"], style=themed("error") if status == "error" else ""),
                          number_text(c["error"], 4), str(c["step"]), str(c["rank"])], str(n)))
        table = self.query_one("#ac-apis", FindTable)
        table.title = "calls by {} · s status · e error".format("status" if self.sort_by == "status"
                                                                else "error, largest first")
        fill_table(table, ("status", "call", "rel err", "step", "rank"), rows, hide_when_empty=False)
        if table.row_count:
            table.move_cursor(row=0)
            self._select(int(str(table.ordered_rows[0].key.value)))
        else:
            self._no_selection("The online check judged no call." if not self.shown
                               else "No call matches the search or filter.")

    def _no_selection(self, text: str) -> None:
        self.selected = None
        self.query_one("#ac-detail-body", Static).update(Text(text, style="italic"))

    @on(DataTable.RowHighlighted, "#ac-apis")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        n = row_index(event)
        if n is not None and 0 <= n < len(self.shown):
            self._select(n)

    @on(FindTable.Found)
    def _found(self, event: FindTable.Found) -> None:
        if not event.table.row_count and self.shown:
            self._no_selection("No call matches the search or filter.")

    def _select(self, n: int) -> None:
        assert self.result is not None
        self.selected = self.shown[n]
        self.query_one("#ac-detail-body", Static).update(
            call_detail(self.selected, self.result.outputs.get(self.selected["key"], [])))

    def action_sort_status(self) -> None:
        self._sort("status")

    def action_sort_error(self) -> None:
        self._sort("error")

    def _sort(self, by: str) -> None:
        if self.result is not None and self.sort_by != by:
            self.sort_by = by
            self._fill()

    def action_open_dump(self) -> None:
        self.app.open_path(self.path, kind="dump")

    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        self.dismiss()

"""An acc_check result (docs/ACC_CHECK.md): every checked API with its status and worst relative error, sortable
by status (``s``) or by error (``e``), searchable (``/``) and filtered by status (``f``); the detail pane shows the selected API's outputs with their metrics and
reasons; ``r`` writes the reproduction script of the selected API (``engines.acc_check.reproduce``) into the
result folder's ``reproduce/``."""

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Label, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.tables import fill_table
from probe_tui.app.widgets.detail_pane import DetailPane
from probe_tui.app.widgets.find_table import FindTable, row_index
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.formatting import number_text

STATUS_ORDER = {"error": 0, "warning": 1, "SKIP": 2, "pass": 3}
STATUS_STYLE = {"error": "bold error", "warning": "warning", "SKIP": "dim", "pass": "success"}
SORTS = ("status", "error")
DETAIL_METRICS = (("cosine", "cosine"), ("max_abs_err", "max abs err"), ("max_rel_err", "max rel err"),
                  ("mean_rel_err", "mean rel err"), ("thousandth", "thousandth"), ("rmse", "RMSE"),
                  ("eb", "error balance"), ("small_value_err_ratio", "small-value err"),
                  ("binary_error_rate", "binary err"), ("rel_err_ratio", "rel err ratio"),
                  ("abs_err_ratio", "abs err ratio"), ("inf_nan_error_ratio", "inf/nan err"),
                  ("max_ulp_err", "max ULP"), ("mean_ulp_err", "mean ULP"), ("ulp_err_proportion", "ULP > thr"))


def is_acc_check_result(path: Path) -> bool:
    """A folder holding a finished acc_check's store (``acc_check.h5``)."""
    from engines.acc_check.results import KIND
    from engines.store import store_kinds

    path = Path(path)
    return path.is_dir() and KIND in store_kinds(path)


class AccCheckResult:
    """The APIs of a check, each with its outputs and its worst relative error (NaN: no float output judged)."""

    def __init__(self, apis: List[Dict[str, Any]], outputs: List[Dict[str, Any]]) -> None:
        self.apis = apis
        self.outputs: Dict[str, List[Dict[str, Any]]] = {}
        for out in outputs:
            self.outputs.setdefault(str(out["api"]), []).append(out)
        for api in apis:
            errors = [float(o["max_rel_err"]) for o in self.outputs.get(str(api["name"]), [])
                      if _finite(o.get("max_rel_err"))]
            api["error"] = max(errors) if errors else math.nan

    def count(self, status: str) -> int:
        return sum(1 for a in self.apis if a["status"] == status)


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def sort_apis(apis: List[Dict[str, Any]], by: str) -> List[Dict[str, Any]]:
    """``status``: errors, warnings, SKIP, passes (worst error first within each); ``error``: largest relative
    error first, APIs without one last."""
    def error_key(a: Dict[str, Any]) -> float:
        return -float(a["error"]) if _finite(a["error"]) else math.inf

    if by == "error":
        return sorted(apis, key=lambda a: (error_key(a), STATUS_ORDER.get(a["status"], 9), a["name"]))
    return sorted(apis, key=lambda a: (STATUS_ORDER.get(a["status"], 9), error_key(a), a["name"]))


def reproduce_name(api: Dict[str, Any]) -> str:
    """The OP_NAME ``probe-tui reproduce`` takes for this API (rank and step named, as the result may hold
    several)."""
    name = str(api["name"])
    return name if name.startswith("rank") else "rank{}.step{}.{}".format(api["rank"], api["step"], name)


def api_detail(api: Dict[str, Any], outputs: List[Dict[str, Any]]) -> Group:
    status = str(api["status"])
    parts: List[Any] = [
        Text(str(api["name"]), style="bold"),
        Text.assemble((status, themed(STATUS_STYLE.get(status, ""))), "  forward {} · backward {} · rank {} · step {}".format(
            str(api["forward"]).strip() or "—", str(api["backward"]).strip() or "—", api["rank"], api["step"]))]
    if api.get("message"):
        parts.append(Text(str(api["message"]), style="italic"))
    for out in outputs:
        ostatus = str(out["status"])
        parts.append(Text(""))
        parts.append(Text.assemble((str(out["name"]), "bold"), "  ", (ostatus, themed(STATUS_STYLE.get(ostatus, "")))))
        parts.append(Text("{} vs {} {} · {} standard".format(out.get("device_dtype", ""), out.get("bench_dtype", ""),
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


class AccCheckScreen(ResultScreen):
    SCOPE = "acccheck"
    CSS_PATH = "acc_check.tcss"
    BINDINGS = bindings_for("acccheck")

    FOCUS = "#ac-apis"
    VERDICT = "#ac-verdict"
    TITLE = "acc_check"
    READ_ERROR = "{path}: cannot read the acc_check result: {exc}"

    class Reproduced(Message):
        def __init__(self, text: str, error: bool) -> None:
            super().__init__()
            self.text, self.error = text, error

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Optional[AccCheckResult] = None
        self.sort_by = "status"
        self.shown: List[Dict[str, Any]] = []
        self.selected: Optional[Dict[str, Any]] = None
        self.last_written: Optional[Tuple[Path, Path]] = None

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("acc_check", "bold"), " · " + relative_text(self.path, self.app.root)),
                     id="ac-title")
        yield Static(Text("Reading the result…", style="italic"), id="ac-verdict")
        with Horizontal(id="ac-body"):
            with Vertical(id="ac-left"):
                yield Label("", id="ac-table-title", classes="pane-title")
                yield FindTable(id="ac-apis", counter="#ac-table-title", filters=[
                    ("errors", self._status_is("error")), ("warnings", self._status_is("warning")),
                    ("not passed", self._not_passed)])
            with VerticalScroll(id="ac-detail"):
                yield DetailPane("", id="ac-detail-body")
        yield KeyFooter()

    def _status_is(self, status: str):
        """A filter on the row key (the row's place in ``self.shown``): the API's status is ``status``."""
        return lambda key: self.shown[int(key)]["status"] == status

    def _not_passed(self, key: str) -> bool:
        return self.shown[int(key)]["status"] != "pass"

    def read(self) -> AccCheckResult:
        from engines.acc_check.results import read_result

        return AccCheckResult(*read_result(self.path))

    def show(self, result: AccCheckResult) -> None:
        self.result = result
        errors, warnings, skipped = result.count("error"), result.count("warning"), result.count("SKIP")
        verdict = "{} APIs checked: {} error, {} warning, {} not replayed, {} pass".format(
            len(result.apis), errors, warnings, skipped, result.count("pass"))
        style = themed("bold error") if errors else themed("bold warning") if warnings else themed("bold success")
        self.query_one("#ac-verdict", Static).update(Text(verdict, style=style))
        self._fill()

    def _fill(self) -> None:
        assert self.result is not None
        self.shown = sort_apis(self.result.apis, self.sort_by)
        rows = []
        for n, a in enumerate(self.shown):
            status = str(a["status"])
            rows.append(([Text(status, style=themed(STATUS_STYLE.get(status, ""))), number_text(a["error"], 4),
                          Text(str(a["name"]), style=themed("error") if status == "error" else ""),
                          str(a["forward"]).strip() or "—", str(a["backward"]).strip() or "—"], str(n)))
        table = self.query_one("#ac-apis", FindTable)
        table.title = "APIs by {} · s status · e error".format("status" if self.sort_by == "status"
                                                               else "error, largest first")
        fill_table(table, ("status", "max rel err", "API", "fwd", "bwd"), rows, hide_when_empty=False)
        if table.row_count:
            table.move_cursor(row=0)
            self._select(int(str(table.ordered_rows[0].key.value)))
        else:
            self.selected = None
            self.query_one("#ac-detail-body", DetailPane).show(Text(
                "The check judged no API." if not self.shown else "No API matches the search or filter.",
                style="italic"))

    @on(DataTable.RowHighlighted, "#ac-apis")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        n = row_index(event)  # the row's place in self.shown (the table may show a search's rows only)
        if n is not None and 0 <= n < len(self.shown):
            self._select(n)

    @on(FindTable.Found)
    def _found(self, event: FindTable.Found) -> None:
        if not event.table.row_count and self.shown:
            self.selected = None
            self.query_one("#ac-detail-body", DetailPane).show(Text("No API matches the search or filter.",
                                                                  style="italic"))

    def _select(self, n: int) -> None:
        assert self.result is not None
        if self.shown[n] is self.selected:  # already shown (a refill, then its cursor's highlight)
            return
        self.selected = self.shown[n]
        outs = self.result.outputs.get(str(self.selected["name"]), [])
        self.query_one("#ac-detail-body", DetailPane).show(api_detail(self.selected, outs))

    def action_sort_status(self) -> None:
        self._sort("status")

    def action_sort_error(self) -> None:
        self._sort("error")

    def _sort(self, by: str) -> None:
        if self.result is not None and self.sort_by != by:
            self.sort_by = by
            self._fill()

    def action_reproduce(self) -> None:
        if self.selected is None:
            self.notify("No API selected.", severity="warning", title="acc_check")
            return
        self.notify("Writing the reproduction script of {}…".format(self.selected["name"]), title="acc_check")
        self._reproduce(reproduce_name(self.selected))

    @work(thread=True, exclusive=True, group="reproduce", exit_on_error=False)
    def _reproduce(self, op_name: str) -> None:
        from engines.acc_check.reproduce import reproduce
        from engines.errors import BadInputError, JobError

        out_dir = self.path / "reproduce"
        try:
            script, npz = reproduce(str(self.path), op_name, str(out_dir))
        except (JobError, BadInputError, OSError) as exc:
            self.post_message(self.Reproduced(str(exc), True))
            return
        self.last_written = (script, npz)
        self.post_message(self.Reproduced("Wrote {} and {} (run: python {})".format(
            relative_text(script, self.app.root), npz.name, script.name), False))

    @on(Reproduced)
    def _reproduced(self, message: "AccCheckScreen.Reproduced") -> None:
        self.notify(message.text, severity="error" if message.error else "information", title="reproduce",
                    timeout=10)

    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        self.dismiss()

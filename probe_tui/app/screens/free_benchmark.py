"""free_benchmark's results: the flagged calls with their ratio and threshold (every check with ``a``), and the
chart of the selected call's ratio over the steps against its threshold."""

from pathlib import Path
from typing import Any, Dict, List, Optional

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Label, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.data.check_results import FreeBenchmarkResult, read_free_benchmark
from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.tables import fill_table
from probe_tui.app.widgets.find_table import FindTable, row_index
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.app.widgets.metric_chart import MetricChart
from probe_tui.formatting import number_text


def excess(check: Dict[str, Any]) -> float:
    """How far past its threshold a check is (ratio / threshold); NaN when it has no ratio (to_cpu)."""
    ratio, threshold = check.get("ratio"), check.get("threshold")
    try:
        return float(ratio) / float(threshold)
    except (TypeError, ValueError, ZeroDivisionError):
        return float("nan")


def check_detail(check: Dict[str, Any]) -> Group:
    bad = not check["consistent"]
    parts = [Text(str(check["name"]), style="bold"),
             Text("rank {} · step {} · {} stage · output {}".format(check["rank"], check["step"], check["stage"],
                                                                   check["output_index"]), style="dim"),
             Text("{} · {}".format(check["pert_mode"], check["handler"]), style="dim"),
             Text.assemble(("ratio ", "bold"), (number_text(check.get("ratio"), 6), themed("bold error") if bad else themed("success")),
                           (" vs threshold ", "bold"), number_text(check.get("threshold"), 6)),
             Text("inconsistent: the output moved more than its dtype allows" if bad else "consistent",
                  style=themed("error") if bad else themed("success")),
             Text("{} {}".format(str(check.get("dtype", "")).replace("torch.", ""), check.get("shape", "")))]
    if check.get("replaced"):
        parts.append(Text("fix: the re-run's output replaced the original", style=themed("warning")))
    if check.get("detail"):
        parts.append(Text(str(check["detail"]), style="italic"))
    return Group(*parts)


class FreeBenchmarkScreen(ResultScreen):
    SCOPE = "freebench"
    CSS_PATH = "free_benchmark.tcss"
    BINDINGS = bindings_for("freebench")

    FOCUS = "#fb-checks"
    VERDICT = "#fb-verdict"
    TITLE = "free_benchmark"
    READ_ERROR = "{path}: cannot read the free_benchmark results: {exc}"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Optional[FreeBenchmarkResult] = None
        self.show_all = False
        self.shown: List[Dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("free_benchmark", "bold"), " · " + relative_text(self.path, self.app.root)),
                     id="fb-title")
        yield Static(Text("Reading the result…", style="italic"), id="fb-verdict")
        with Horizontal(id="fb-body"):
            with Vertical(id="fb-left"):
                yield Label("", id="fb-table-title", classes="pane-title")
                yield FindTable(id="fb-checks", counter="#fb-table-title")
            with Vertical(id="fb-right"):
                yield MetricChart(id="fb-chart")
                with VerticalScroll(id="fb-detail"):
                    yield Static("", id="fb-detail-body")
        yield KeyFooter()

    def read(self) -> FreeBenchmarkResult:
        return read_free_benchmark(self.path)

    def show(self, result: FreeBenchmarkResult) -> None:
        self.result = result
        bad = self.result.inconsistent
        verdict = str(self.result.summary.get("verdict") or "{} of {} checks inconsistent".format(
            len(bad), len(self.result.checks)))
        mode = str(self.result.summary.get("mode") or "")
        self.query_one("#fb-verdict", Static).update(Text.assemble((verdict, themed("bold error") if bad else themed("bold success")),
                                                                   ("  " + mode if mode else "", "dim")))
        self._fill()

    def _fill(self) -> None:
        result = self.result
        checks = result.checks if self.show_all else result.inconsistent
        self.shown = sorted(checks, key=lambda c: (-(excess(c) if excess(c) == excess(c) else -1.0), c["step"],
                                                   c["name"]))
        rows = []
        for n, c in enumerate(self.shown):
            style = themed("error") if not c["consistent"] else ""
            rows.append(([str(c["step"]), Text(number_text(c.get("ratio"), 6), style=style),
                          number_text(c.get("threshold"), 6), Text(str(c["name"]), style=style), c["stage"],
                          str(c["output_index"]), str(c.get("dtype", "")).replace("torch.", ""),
                          "fixed" if c.get("replaced") else ""], str(n)))
        table = self.query_one("#fb-checks", FindTable)
        which = "every check" if self.show_all else "inconsistent outputs"
        table.title = "{}, worst first · a: {}".format(which, "inconsistent only" if self.show_all else "every check")
        fill_table(table, ("step", "ratio", "threshold", "call", "stage", "out", "dtype", ""), rows,
                   hide_when_empty=False)
        if self.shown:
            self._select(0)
        else:
            self.query_one("#fb-detail-body", Static).update(Text("Every checked output stayed within its "
                                                                  "threshold.", style=themed("success")))

    @on(DataTable.RowHighlighted, "#fb-checks")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        n = row_index(event)  # the row's place in self.shown (the table may show a search's rows only)
        if n is not None and 0 <= n < len(self.shown):
            self._select(n)

    def _select(self, n: int) -> None:
        check = self.shown[n]
        self.query_one("#fb-detail-body", Static).update(check_detail(check))
        same = [c for c in self.result.checks if c["name"] == check["name"] and c["rank"] == check["rank"]
                and c["output_index"] == check["output_index"] and c["stage"] == check["stage"]]
        same.sort(key=lambda c: c["step"])
        steps = [c["step"] for c in same]
        ratios = [float(c["ratio"]) for c in same]
        chart = self.query_one("#fb-chart", MetricChart)
        threshold = check.get("threshold")
        chart.show({"ratio/" + str(check["name"]): (steps, ratios)}, hline=float(threshold)
                   if threshold == threshold and threshold is not None else None)

    def action_toggle_all(self) -> None:
        if self.result is not None:
            self.show_all = not self.show_all
            self._fill()

    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        self.dismiss()

"""overflow_check's results: per step, the first call that made inf/NaN and its origin; the flagged calls of the
step under the cursor with their reasons and code lines; the kept tensors a key away in the dump browser.
An analyze-overflow result shows its replays (range or precision overflow) in the same screen."""

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Label, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.data.check_results import OverflowResult, read_overflow
from probe_tui.app.ranks import RankSelector
from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.tables import fill_table
from probe_tui.app.widgets.find_table import FindTable, row_index
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.app.widgets.rank_bar import RankBar
from probe_tui.formatting import number_text

ORIGIN_STYLES = {"produced": "bold error", "inputs": "warning", "mask": "dim"}
CATEGORY_STYLES = {"range": "bold error", "precision": "bold warning", "not reproduced": "info", "inherited": "dim",
                   "not replayed": "dim"}


def _json_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join("{}: {}".format(k, v) for k, v in value.items())
    return str(value or "")


def call_detail(call: Dict[str, Any]) -> Group:
    style = themed(ORIGIN_STYLES.get(call.get("origin", ""), ""))
    parts = [Text(str(call["name"]), style="bold"),
             Text("rank {} · step {} · flagged call #{} · {} {}".format(call["rank"], call["step"], call["order"] + 1,
                                                                        call.get("kind", ""),
                                                                        call.get("direction", "")), style="dim"),
             Text.assemble(("origin ", "bold"), (str(call.get("origin", "")), style)),
             Text(str(call.get("reason") or ""), style=style)]
    if call.get("first"):
        parts.append(Text("the step's first origin", style=themed("bold error")))
    if call.get("where"):
        parts += [Text("code", style="bold"), Text(str(call["where"]))]
    if call.get("parent"):
        parts.append(Text("in " + str(call["parent"]), style="dim"))
    if call.get("nonfinite"):
        parts += [Text("non-finite tensors", style="bold"), Text(_json_text(call["nonfinite"]), style=themed("error"))]
    if call.get("kept"):
        parts.append(Text("its tensors are kept: d opens them in the dump browser", style=themed("success")))
    if call.get("not_saved"):
        parts += [Text("not saved", style="bold"), Text(_json_text(call["not_saved"]), style="dim")]
    return Group(*parts)


class OverflowScreen(RankSelector, ResultScreen):
    SCOPE = "overflow"
    CSS_PATH = "overflow.tcss"
    BINDINGS = bindings_for("overflow")

    FOCUS = "#ovf-steps"
    VERDICT = "#ovf-verdict"
    TITLE = "Overflow"
    READ_ERROR = "{path}: cannot read the overflow results: {exc}"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Optional[OverflowResult] = None
        self.shown_calls: List[Dict[str, Any]] = []
        self.verdict_renderable: Any = None
        self.detail_renderable: Any = None
        self.shown_steps: List[Dict[str, Any]] = []
        self.shown_replays: List[Dict[str, Any]] = []
        self.init_ranks()

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("Overflow check", "bold"), " · " + relative_text(self.path, self.app.root)),
                     id="ovf-title")
        yield Static(Text("Reading the result…", style="italic"), id="ovf-verdict")
        yield RankBar()
        with Horizontal(id="ovf-body"):
            with Vertical(id="ovf-left"):
                yield Label("Steps", id="steps-title", classes="pane-title")
                yield FindTable(id="ovf-steps", counter="#steps-title", zebra_stripes=False,
                                filters=[("flagged", self._flagged)])
                yield Label("Flagged calls", id="calls-title", classes="pane-title")
                yield FindTable(id="ovf-calls", counter="#calls-title", zebra_stripes=False)
            with VerticalScroll(id="ovf-detail"):
                yield Static("", id="ovf-detail-body")
        yield KeyFooter()

    def _flagged(self, key: str) -> bool:
        """The filter of the steps table: steps that flagged a call (replays: every one)."""
        n = int(key)
        return not (0 <= n < len(self.shown_steps)) or bool(self.shown_steps[n]["flagged"])

    def read(self) -> OverflowResult:
        return read_overflow(self.path)

    def show(self, result: OverflowResult) -> None:
        self.result = result
        verdict = str(result.summary.get("verdict") or "")
        flagged = sum(int(s.get("flagged") or 0) for s in result.steps)
        if not verdict:
            verdict = "{} flagged call(s) in {} checked step(s)".format(flagged, len(result.steps))
        style = themed("bold error") if (flagged or result.replays) else themed("bold success")
        self.verdict_renderable = Text(verdict, style=style)
        self.query_one("#ovf-verdict", Static).update(self.verdict_renderable)
        self.setup_ranks({int(s["rank"]) for s in result.steps} | {int(r["rank"]) for r in result.replays})
        self.rank_changed()

    def _of_rank(self, rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return [r for r in rows if self.rank is None or int(r["rank"]) == self.rank]

    def rank_changed(self) -> None:
        """Show the chosen rank's steps (or replays); every rank's for None."""
        result = self.result
        if result is None:
            return
        if result.analysis:
            self._show_replays()
        else:
            self._show_steps()

    def rank_entries(self) -> List[Tuple[int, Text]]:
        """Per rank: its first flagged step and call, or clean."""
        entries = []
        for rank in self.ranks:
            flagged = [s for s in self.result.steps if int(s["rank"]) == rank and s["flagged"]] if self.result else []
            if flagged:
                first = flagged[0]
                note = Text.assemble(("first flagged at step {}: ".format(first["step"]), themed("error")),
                                     str(first.get("first") or ""), (" ({} flagged step{})".format(
                                         len(flagged), "" if len(flagged) == 1 else "s"), "dim"))
            else:
                note = Text("clean", style=themed("success"))
            entries.append((rank, note))
        return entries

    def _show_steps(self) -> None:
        rows = []
        self.shown_steps = self._of_rank(self.result.steps)
        for s in self.shown_steps:
            first = str(s.get("first") or "")
            origin = str(s.get("first_origin") or "")
            status = Text("flagged {}".format(s["flagged"]), style=themed("bold error")) if s["flagged"] else Text("clean",
                                                                                                       style=themed("success"))
            rows.append(([str(s["step"]), str(s["rank"]), status, str(s["checked"]), str(s["masks"]),
                          Text(first or "—", style=themed(ORIGIN_STYLES.get(origin, ""))), Text(origin, style=ORIGIN_STYLES
                                                                                         .get(origin, "")),
                          "stopped" if s.get("stopped") else ""], str(len(rows))))
        table = self.query_one("#ovf-steps", FindTable)
        table.title = "Steps: the first call that made inf/NaN"
        fill_table(table, ("step", "rank", "status", "checked", "masks", "first origin", "origin", ""), rows,
                   hide_when_empty=False)
        first_bad = next((i for i, s in enumerate(self.shown_steps) if s["flagged"]), 0)
        if table.row_count and str(first_bad) in table.rows:
            table.move_cursor(row=table.get_row_index(str(first_bad)))
            self._show_calls_of(first_bad)

    @on(DataTable.RowHighlighted, "#ovf-steps")
    def _step_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.result is None:
            return
        n = row_index(event)  # the row's place in the screen's list (the table may show a search's rows only)
        if n is None:
            return
        if self.result.analysis:
            if 0 <= n < len(self.shown_replays):
                self._replay_detail(n)
        else:
            self._show_calls_of(n)

    def _show_calls_of(self, index: int) -> None:
        if not (0 <= index < len(self.shown_steps)):
            return
        step = self.shown_steps[index]
        self.shown_calls = self.result.calls_of(step["rank"], step["step"])
        rows = [([str(c["order"] + 1), Text(str(c["name"]), style=themed(ORIGIN_STYLES.get(c["origin"], ""))),
                  Text(str(c["origin"]), style=themed(ORIGIN_STYLES.get(c["origin"], ""))), str(c.get("reason") or ""),
                  str(c.get("where") or "")], str(n)) for n, c in enumerate(self.shown_calls)]
        calls = self.query_one("#ovf-calls", FindTable)
        calls.title = "Flagged calls of step {} (rank {})".format(step["step"], step["rank"])
        fill_table(calls, ("#", "call", "origin", "reason", "code"), rows, hide_when_empty=False)
        if self.shown_calls:
            self._detail(call_detail(self.shown_calls[0]))
        else:
            self._detail(Text("Step {}: no call produced or passed on inf/NaN ({} masked call(s) are not "
                             "overflows).".format(step["step"], step["masks"]), style=themed("success")))

    @on(DataTable.RowHighlighted, "#ovf-calls")
    def _call_highlighted(self, event: DataTable.RowHighlighted) -> None:
        n = row_index(event)
        if n is not None and 0 <= n < len(self.shown_calls):
            self._detail(call_detail(self.shown_calls[n]))

    def _show_replays(self) -> None:
        replays = self.shown_replays = self._of_rank(self.result.replays)
        rows = [([str(r["step"]), str(r["rank"]), str(r["name"]), str(r.get("dtype", "")).replace("torch.", ""),
                  str(r.get("as_saved", "")), "{} {}".format(r.get("replay_dtype", ""), r.get("high_precision", "")),
                  number_text(r.get("high_max_abs")), Text(str(r["category"]),
                                                           style=themed(CATEGORY_STYLES.get(r["category"], "")))],
                 str(n)) for n, r in enumerate(replays)]
        table = self.query_one("#ovf-steps", FindTable)
        table.title = "Replays: range or precision overflow?"
        fill_table(table, ("step", "rank", "call", "dtype", "as saved", "replayed", "max |value|", "category"), rows,
                   hide_when_empty=False)
        self.query_one("#ovf-calls", DataTable).display = False
        self.query_one("#calls-title", Label).display = False
        if replays:
            self._replay_detail(0)

    def _replay_detail(self, n: int) -> None:
        r = self.shown_replays[n]
        self._detail(Group(
            Text(str(r["name"]), style="bold"), Text("rank {} · step {} · origin {}".format(r["rank"], r["step"],
                                                                                           r.get("origin", "")),
                                                    style="dim"),
            Text(str(r["category"]), style=themed(CATEGORY_STYLES.get(r["category"], ""))), Text(str(r.get("verdict", "")))))

    def _detail(self, renderable: Any) -> None:
        self.detail_renderable = renderable
        self.query_one("#ovf-detail-body", Static).update(renderable)

    def action_open_dump(self) -> None:
        from probe_tui.app.data.dump_index import is_dump

        if not is_dump(self.path):
            self.notify("No kept tensors here (a clean run keeps none).", timeout=3)
            return
        self.app.open_path(self.path, kind="dump")

    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        self.dismiss()

"""The verdict of a diagnose result folder (``verdict.json``): the culprit and its evidence, or each module's
share of the error; ``c`` opens the compare that decided."""

from pathlib import Path
from typing import Any, Dict

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.diagnose_view import read_verdict, report_lines

VERDICT_FILE = "verdict.json"


def is_diagnose_result(path: Path) -> bool:
    return (Path(path) / VERDICT_FILE).is_file()


def _evidence(verdict: Dict[str, Any]) -> Any:
    ev = verdict.get("culprit") or {}
    parts = []
    if ev.get("inputs") or ev.get("outputs"):
        table = Table(title="Evidence: error against the golden", title_justify="left", expand=True)
        for col in ("", "tensor", "rel err", "matches"):
            table.add_column(col)
        for item in ev.get("inputs", []):
            table.add_row("input", item["name"], "{:.3g}".format(item["err"]), "yes" if item.get("matches") else "no")
        for item in ev.get("outputs", []):
            table.add_row("output", item["name"], "{:.3g}".format(item["err"]), "")
        parts.append(table)
    if ev.get("stack"):
        parts.append(Text("Call stack (innermost frames)\n" + "\n".join(ev["stack"]), style="dim"))
    shares = verdict.get("module_shares") or []
    if shares and not ev:
        table = Table(title="Share of the error added, per top-level module", title_justify="left", expand=True)
        for col in ("module", "share", "ops", "largest op"):
            table.add_column(col)
        for s in shares[:12]:
            table.add_row(s["module"], "{:.1%}".format(s["share"]), str(s["ops"]), s["largest_op"])
        parts.append(table)
    disk = verdict.get("disk") or {}
    if disk.get("fraction_of_full_dump") is not None:
        parts.append(Text("Stage 2 wrote {:.2%} of a full tensor dump.".format(disk["fraction_of_full_dump"]),
                          style="dim"))
    return Group(*parts)


class DiagnoseScreen(ResultScreen):
    SCOPE = "diagnose"
    CSS_PATH = "diagnose.tcss"
    BINDINGS = bindings_for("diagnose")
    FOCUS = "#diagnose-body"
    VERDICT = "#diagnose-verdict"
    TITLE = "Diagnose"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.verdict: Dict[str, Any] = {}
        self.verdict_renderable: Any = None
        self.evidence_renderable: Any = None

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("Diagnose", "bold"), " · " + relative_text(self.path, self.app.root)),
                     id="diagnose-title")
        with VerticalScroll(id="diagnose-body"):
            yield Static(Text("Reading the verdict…", style="italic"), id="diagnose-verdict")
            yield Static("", id="diagnose-evidence")
        yield KeyFooter()

    def read(self) -> Any:
        verdict = read_verdict(self.path)
        if verdict is None:
            raise ValueError("no readable verdict.json")
        return verdict

    def show(self, result: Any) -> None:
        self.verdict = result
        self.verdict_renderable = Text.from_markup("\n".join(report_lines(self.verdict)))
        self.evidence_renderable = _evidence(self.verdict)
        self.query_one(self.VERDICT, Static).update(self.verdict_renderable)
        self.query_one("#diagnose-evidence", Static).update(self.evidence_renderable)

    def action_open_compare(self) -> None:
        stage = "stage2" if (self.verdict.get("stage2") or {}).get("ran") else "stage1"
        folder = (self.verdict.get(stage) or {}).get("compare")
        if not folder:
            self.notify("No compare result to open.", severity="warning")
            return
        path = Path(folder)
        self.app.open_path(path if path.is_absolute() else self.path / ".." / path)

    def action_back(self) -> None:
        self.dismiss()

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
from textual.message import Message

from probe_tui.app.actions import bindings_for
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.screens.status_table import StatusTableScreen
from probe_tui.app.styles import themed
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
        parts.extend(output_detail(out, str(out["name"]), out.get("device_dtype", "")))
    return Group(*parts)


def output_detail(out: Dict[str, Any], name: str, device_dtype: Any) -> List[Any]:
    """The detail lines of one judged output (an acc_check result's or the online check's): status, dtypes,
    standard, reason and the metrics that were computed."""
    ostatus = str(out["status"])
    parts: List[Any] = [Text(""), Text.assemble((name, "bold"), "  ", (ostatus, themed(STATUS_STYLE.get(ostatus, "")))),
                        Text("{} vs {} {} · {} standard".format(device_dtype, out.get("bench_dtype", ""),
                                                                out.get("shape", ""), out.get("standard", "") or "—"),
                             style="dim")]
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
    return parts


class AccCheckScreen(StatusTableScreen):
    SCOPE = "acccheck"
    BINDINGS = bindings_for("acccheck")

    TITLE = "acc_check"
    HEADING = "acc_check"
    READ_ERROR = "{path}: cannot read the acc_check result: {exc}"
    COLUMNS = ("status", "max rel err", "API", "fwd", "bwd")

    class Reproduced(Message):
        def __init__(self, text: str, error: bool) -> None:
            super().__init__()
            self.text, self.error = text, error

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Optional[AccCheckResult] = None
        self.last_written: Optional[Tuple[Path, Path]] = None

    def read(self) -> AccCheckResult:
        from engines.acc_check.results import read_result

        return AccCheckResult(*read_result(self.path))

    def show(self, result: AccCheckResult) -> None:
        self.result = result
        errors, warnings, skipped = result.count("error"), result.count("warning"), result.count("SKIP")
        verdict = "{} APIs checked: {} error, {} warning, {} not replayed, {} pass".format(
            len(result.apis), errors, warnings, skipped, result.count("pass"))
        self.show_verdict(verdict, errors, warnings)

    def sorted_rows(self) -> List[Dict[str, Any]]:
        assert self.result is not None
        return sort_apis(self.result.apis, self.sort_by)

    def cells(self, a: Dict[str, Any]) -> List[Any]:
        status = str(a["status"])
        return [Text(status, style=themed(STATUS_STYLE.get(status, ""))), number_text(a["error"], 4),
                Text(str(a["name"]), style=themed("error") if status == "error" else ""),
                str(a["forward"]).strip() or "—", str(a["backward"]).strip() or "—"]

    def detail(self, api: Dict[str, Any]) -> Group:
        assert self.result is not None
        return api_detail(api, self.result.outputs.get(str(api["name"]), []))

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

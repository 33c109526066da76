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
from rich.text import Text

from probe_tui.app.actions import bindings_for
from probe_tui.app.screens.acc_check import STATUS_ORDER, STATUS_STYLE, output_detail, sort_apis
from probe_tui.app.screens.status_table import StatusTableScreen
from probe_tui.app.styles import themed
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
        parts.extend(output_detail(out, str(out["output"]), out.get("dtype", "")))
    return Group(*parts)


class OnlineCheckScreen(StatusTableScreen):
    SCOPE = "onlinecheck"
    BINDINGS = bindings_for("onlinecheck")

    TITLE = "online check"
    HEADING = "online check"
    READING = "Reading the online check…"
    READ_ERROR = "{path}: cannot read the online check: {exc}"
    NOUN = "call"
    COLUMNS = ("status", "call", "rel err", "step", "rank")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Optional[OnlineCheckResult] = None

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
        self.show_verdict(verdict, errors, warnings)

    def sorted_rows(self) -> List[Dict[str, Any]]:
        assert self.result is not None
        return sort_apis(self.result.calls, self.sort_by)

    def cells(self, c: Dict[str, Any]) -> List[Any]:
        status = str(c["status"])
        return [Text(status, style=themed(STATUS_STYLE.get(status, ""))),
                Text(c["name"], style=themed("error") if status == "error" else ""),
                number_text(c["error"], 4), str(c["step"]), str(c["rank"])]

    def detail(self, call: Dict[str, Any]) -> Group:
        assert self.result is not None
        return call_detail(call, self.result.outputs.get(call["key"], []))

    def action_open_dump(self) -> None:
        self.app.open_path(self.path, kind="dump")

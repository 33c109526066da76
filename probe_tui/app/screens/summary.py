"""The run summary: run.json's fields, the rank folders, and every file with its size.

What a run folder no richer view claims opens as, any other folder too (without the run fields), and what every
view's ``i`` key shows for its own folder (``open_path(path, kind="run")``). The folder is listed on a worker
thread (:class:`ResultScreen`), at most ``MAX_FILES`` files.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Label, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.tables import fill_table
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.formatting import format_bytes, format_time, summary_field

MAX_FILES = 2000
RUN_FIELDS = ("run_id", "task", "framework", "status", "exit_code", "started", "finished", "duration_s", "steps",
              "ranks", "host", "pid")
TIME_FIELDS = ("started", "finished")


@dataclass
class FolderSummary:
    path: Path
    run: Dict[str, Any] = field(default_factory=dict)
    files: List[Tuple[str, int]] = field(default_factory=list)
    ranks: List[str] = field(default_factory=list)
    total_bytes: int = 0
    truncated: bool = False
    error: str = ""


def summarise_folder(path: Path) -> FolderSummary:
    """Read run.json (when there is one) and list the files under ``path`` (relative, with sizes)."""
    path = Path(path)
    out = FolderSummary(path)
    run_json = path / "run.json"
    if run_json.is_file():
        try:
            out.run = json.loads(run_json.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            out.error = f"{run_json}: cannot read: {exc}"
    for current, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = Path(current) / name
            try:
                size = full.stat().st_size
            except OSError:
                continue
            out.total_bytes += size
            if len(out.files) < MAX_FILES:
                out.files.append((str(full.relative_to(path)), size))
            else:
                out.truncated = True
    try:
        out.ranks = sorted(p.name for p in path.iterdir() if p.is_dir() and p.name.startswith("rank"))
    except OSError as exc:
        out.error = out.error or f"{path}: {exc.strerror or exc}"
    return out


def _summary_items(summary: Any) -> List[Tuple[str, str]]:
    """The run summary's scalar entries, named and formatted as the CLI's summary (``probe_tui.formatting``); one
    level of nesting flattened; long lists and tables left out."""
    out: List[Tuple[str, str]] = []
    if not isinstance(summary, dict):
        return out
    for key, value in summary.items():
        if isinstance(value, dict):
            out += [summary_field(f"{key}.{k}", v) for k, v in value.items() if isinstance(v, (str, int, float, bool))]
        elif isinstance(value, list):
            if len(value) <= 8 and all(isinstance(v, (str, int, float)) for v in value):
                out.append((key, ", ".join(map(str, value)) or "none"))
        elif value is not None:
            out.append(summary_field(key, value))
    return out


class RunSummaryScreen(ResultScreen):
    SCOPE = "summary"
    CSS_PATH = "summary.tcss"
    BINDINGS = bindings_for("summary")

    FOCUS = "#files"
    TITLE = "Run summary"
    READ_ERROR = "{path}: cannot summarise the folder: {exc}"

    summary: reactive[Optional[FolderSummary]] = reactive(None, init=False, always_update=True, bindings=True)
    """What the worker read: fills both tables and decides whether ``e`` (edit the run's config) is offered."""

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("Run summary", "bold"), f" · {relative_text(self.path, self.app.root)}"),
                     id="summary-title")
        with Horizontal(id="summary-body"):
            with Vertical(id="summary-left"):
                yield Label("Run", classes="pane-title")
                yield DataTable(id="run-fields", show_header=False, cursor_type="none")
            with Vertical(id="summary-right"):
                yield Label("Files", id="files-title", classes="pane-title")
                yield DataTable(id="files", cursor_type="row")
        yield KeyFooter()

    def read(self) -> FolderSummary:
        return summarise_folder(self.path)

    def show(self, result: FolderSummary) -> None:
        self.summary = result

    def watch_summary(self, summary: Optional[FolderSummary]) -> None:
        if summary is None:
            return
        field_rows: List[Tuple[List[Any], str]] = []
        run = summary.run
        for key in RUN_FIELDS:
            if key in run and run[key] not in (None, ""):
                value = run[key]
                if key in TIME_FIELDS:
                    text = format_time(value)
                elif isinstance(value, list):
                    text = ", ".join(map(str, value)) or "none"
                else:
                    text = summary_field(key, value)[1]
                field_rows.append(([key, text], key))
        field_rows.append((["folder", relative_text(self.path, self.app.root)], "folder"))
        field_rows.append((["rank folders", ", ".join(summary.ranks) or "none"], "rank folders"))
        field_rows.append((["size", format_bytes(summary.total_bytes)], "size"))
        for key, value in _summary_items(run.get("summary")):
            field_rows.append(([f"summary.{key}", value], f"summary.{key}"))
        fill_table(self.query_one("#run-fields", DataTable), ("Field", "Value"), field_rows, hide_when_empty=False)
        fill_table(self.query_one("#files", DataTable), ("File", "Size"),
                   [([name, format_bytes(size)], name) for name, size in summary.files], hide_when_empty=False)
        more = f" (first {MAX_FILES} shown)" if summary.truncated else ""
        self.query_one("#files-title", Label).update(f"Files ({len(summary.files)}){more}")
        if summary.error:
            self.notify(summary.error, severity="error")

    def check_action(self, action: str, parameters: tuple) -> Optional[bool]:
        if action == "edit_config":
            return True if (self.summary and isinstance(self.summary.run.get("config"), dict)) else None
        return True

    def action_edit_config(self) -> None:
        if not self.summary or not isinstance(self.summary.run.get("config"), dict):
            self.notify("This folder has no run.json with a config.", severity="warning")
            return
        run_id = self.summary.run.get("run_id") or self.path.name
        self.app.open_builder(self.summary.run["config"], path=None, origin=f"run {run_id}")

    def action_back(self) -> None:
        self.dismiss()

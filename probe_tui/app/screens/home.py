"""Home: the runs and the config files found under the app's folder; start a new config from here."""

from pathlib import Path
from typing import Any, Dict, List, Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Label, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.discovery import (
    ConfigFile,
    check_configs,
    find_config_files,
    find_msprobe_dumps,
    format_time,
    list_runs,
    run_row,
)
from probe_tui.app.screens.base import AppScreen
from probe_tui.app.styles import themed
from probe_tui.app.tables import fill_table
from probe_tui.app.view_prefetch import ViewPrefetch
from probe_tui.app.widgets.find_table import FindTable
from probe_tui.app.widgets.key_footer import KeyFooter

RUN_COLUMNS = ("Run folder", "Task", "Status", "Steps", "Ranks", "Size", "Framework", "Started")
CONFIG_COLUMNS = ("File", "Task", "Modified", "Valid")
#: Widest run folder shown whole; longer ones keep their tail (the run-id), so Task and Status fit at 80 columns.
FOLDER_WIDTH = 38
DEMO_SAMPLE = "statistics.json"
"""The shipped sample ``d`` runs: the tiny demo model, statistics of every API call."""
STATUS_STYLES = {"finished": "success", "running": "info", "stopped": "warning", "disk_full": "warning", "failed": "error",
                 "crashed": "error",
                 "msprobe dump": "accent", "compare result": "accent"}


class HomeScreen(AppScreen):
    SCOPE = "home"
    CSS_PATH = "home.tcss"
    BINDINGS = bindings_for("home")
    AUTO_FOCUS = None  # the first scan focuses the table that has rows

    class Scanned(Message):
        """What a scan of the folder found."""

        def __init__(self, runs: List[Dict[str, Any]], configs: List[ConfigFile], errors: List[str]) -> None:
            super().__init__()
            self.runs = runs
            self.configs = configs
            self.errors = errors

    def __init__(self) -> None:
        super().__init__()
        self.runs: List[Dict[str, Any]] = []
        self.configs: List[ConfigFile] = []
        self.scanned = False
        self.prefetch = ViewPrefetch(self)
        """The run under the cursor, read ahead while the cursor rests on it (``probe_tui.app.view_prefetch``)."""

    def compose(self) -> ComposeResult:
        yield Static(self._title_text(), id="home-title")
        with Vertical(id="runs-pane"):
            yield Label("Runs", id="runs-title", classes="pane-title")
            yield FindTable(id="runs", counter="#runs-title", title="Runs and dumps")
            yield Static("", id="runs-empty", classes="empty")
        with Vertical(id="configs-pane"):
            yield Label("Configs", id="configs-title", classes="pane-title")
            yield FindTable(id="configs", counter="#configs-title", title="Configs")
            yield Static("", id="configs-empty", classes="empty")
        yield KeyFooter()

    def _title_text(self) -> Text:
        return Text.assemble(("probe-tui", "bold"), f" · {self.app.root_label}")

    def set_root_label(self, label: str) -> None:
        """The app lists another folder (``ProbeApp.set_root``)."""
        self.query_one("#home-title", Static).update(self._title_text())

    def on_mount(self) -> None:
        for empty in self.query(".empty"):
            empty.display = False
        self.query_one("#runs-empty", Static).update("Looking for runs…")
        self.query_one("#runs-empty", Static).display = True
        self.query_one("#runs", DataTable).display = False
        self.refresh_listing()

    def on_screen_resume(self) -> None:
        if self.scanned:
            self.refresh_listing()

    # ---- scanning -----------------------------------------------------------------------------------------
    def refresh_listing(self) -> None:
        self._scan(self.app.root, self.app.backend)

    @work(thread=True, exclusive=True, group="home-scan", exit_on_error=False)
    def _scan(self, root: Path, backend: Any) -> None:
        errors: List[str] = []
        runs: List[Dict[str, Any]] = []
        try:
            runs = [run_row(info, root) for info in list_runs(root)]
        except Exception as exc:  # a bad run folder must not hide the others or take the app down
            errors.append(f"listing runs under {root}: {exc}")
        try:
            runs += find_msprobe_dumps(root)
        except Exception as exc:
            errors.append(f"looking for msprobe dumps under {root}: {exc}")
        runs.sort(key=lambda row: row["sort"], reverse=True)
        configs: List[ConfigFile] = []
        try:
            configs = find_config_files(root, list(backend.tasks()))
            check_configs(configs, backend)
        except Exception as exc:
            errors.append(f"looking for configs under {root}: {exc}")
        self.post_message(self.Scanned(runs, configs, errors))

    @on(Scanned)
    def _scanned(self, message: "HomeScreen.Scanned") -> None:
        first = not self.scanned
        self.scanned = True
        self.runs, self.configs = message.runs, message.configs
        with self.app.batch_update():
            self._fill_runs()
            self._fill_configs()
            runs = self.query_one("#runs", DataTable)
            configs = self.query_one("#configs", DataTable)
            if first or not (self.focused is runs or self.focused is configs):
                # at once, not on the next idle (focus()): keys typed as soon as the listing shows go to it
                self.set_focus(runs if self.runs or not self.configs else configs)
        self._read_ahead()  # (a listing that keeps the cursor's row posts no highlight)
        for error in message.errors:
            self.notify(error, severity="error", title="Home")
        if first and self.app.screen is self:  # (not while a view the app started on opens)
            self.call_after_refresh(self._warm_views)

    @work(thread=True, exclusive=True, group="home-warm", exit_on_error=False)
    def _warm_views(self) -> None:
        """Once the listing is on screen: the imports of the views' first opens (``openers.warm_views``)."""
        from probe_tui.app.openers import warm_views

        warm_views()
        self.post_message(self.Warmed())

    class Warmed(Message):
        """The views are imported (``_warm_views``)."""

    @on(Warmed)
    def _warmed(self) -> None:
        self.app.freeze_startup()  # the start's objects, the imports included, out of later collections

    def _fill_runs(self) -> None:
        table = self.query_one("#runs", DataTable)
        selected = self._selected_key(table)
        rows = []
        for row in self.runs:
            status = Text(row["status"], style=themed(STATUS_STYLES.get(row["status"], "")))
            rows.append(([_tail(row["folder"], FOLDER_WIDTH), row["task"], status, row["steps"], row["ranks"], row["size"],
                          row["framework"], row["started"]], row["folder"]))
        fill_table(table, RUN_COLUMNS, rows)
        empty = self.query_one("#runs-empty", Static)
        empty.update(first_run_text(self.app.root_label))
        table.display = bool(self.runs)
        empty.display = not self.runs
        self._restore(table, selected)

    def _fill_configs(self) -> None:
        table = self.query_one("#configs", DataTable)
        selected = self._selected_key(table)
        rows = []
        for config in self.configs:
            valid = Text("✓ valid", style=themed("success")) if config.valid else Text("✗ " + config.problem, style=themed("error"))
            rows.append(([self._relative(config.path), config.task, format_time(config.modified), valid],
                         str(config.path)))
        fill_table(table, CONFIG_COLUMNS, rows)
        empty = self.query_one("#configs-empty", Static)
        empty.update(Text.assemble("No config files here. ", ("n", "bold"),
                                   " starts one from a task, a sample or an msprobe config.json; ",
                                   ("l", "bold"), " loads one from elsewhere."))
        table.display = bool(self.configs)
        empty.display = not self.configs
        self._restore(table, selected)

    def _relative(self, path: Path) -> str:
        try:
            return str(Path(path).relative_to(self.app.root))
        except ValueError:
            return str(path)

    @staticmethod
    def _selected_key(table: DataTable) -> Optional[str]:
        if table.row_count == 0:
            return None
        try:
            return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            return None

    @staticmethod
    def _restore(table: DataTable, key: Optional[str]) -> None:
        if key is None:
            return
        try:
            table.move_cursor(row=table.get_row_index(key))
        except Exception:
            pass

    # ---- selection ----------------------------------------------------------------------------------------
    def _selection(self) -> Optional[tuple]:
        """("run", path) or ("config", path) for the focused table's row."""
        for table_id, kind in (("#runs", "run"), ("#configs", "config")):
            table = self.query_one(table_id, DataTable)
            if self.focused is table and table.row_count:  # set at once; has_focus follows on a message
                key = self._selected_key(table)
                if key is None:
                    return None
                return kind, (self.app.root / key if kind == "run" else Path(key))
        return None

    @on(DataTable.RowHighlighted, "#runs")
    def _run_highlighted(self) -> None:
        self._read_ahead()

    def _read_ahead(self) -> None:
        """The run under the cursor is read ahead once the cursor rests on it (not a run still being written)."""
        table = self.query_one("#runs", DataTable)
        key = self._selected_key(table) if table.display else None
        row = next((r for r in self.runs if r["folder"] == key), None) if key is not None else None
        if row is None:
            self.prefetch.rest(None)
        else:
            self.prefetch.rest(self.app.root / row["folder"], live=row["status"] == "running")

    @on(DataTable.RowSelected)
    def _row_chosen(self, event: DataTable.RowSelected) -> None:
        self.action_open_selected()

    # ---- actions ------------------------------------------------------------------------------------------
    def action_new_config(self) -> None:
        self.app.action_new_config()

    def action_load_config(self) -> None:
        self.app.action_load_config()

    def action_run_demo(self) -> None:
        from probe_tui.app.config_backend import sample_configs

        demo = dict(sample_configs()).get(DEMO_SAMPLE)
        if demo is None:
            self.notify(f"the demo config ({DEMO_SAMPLE}) is not installed", severity="error")
            return
        self.app.start_run(demo)

    def action_refresh(self) -> None:
        self.refresh_listing()
        self.notify("Looking for runs and configs again…", timeout=2)

    def action_switch_table(self) -> None:
        runs = self.query_one("#runs", DataTable)
        configs = self.query_one("#configs", DataTable)
        target = configs if self.focused is runs else runs
        if not target.display:
            target = runs if target is configs else configs
        if target.display:
            # at once, not on the next idle (focus()): a key read with this one (typed fast, a loaded machine)
            # goes to the table tab moved to
            self.set_focus(target)

    def action_open_selected(self) -> None:
        selection = self._selection()
        if selection is None:
            self.notify("Nothing selected: tab moves between runs and configs.", timeout=3)
            return
        kind, path = selection
        if kind == "run":
            ready = self.prefetch.take(path)
            if ready is not None:
                self.app.open_prefetched(ready.screen, ready.loaded)
            else:
                self.app.open_path(path)
        else:
            self.app.load_into_builder(path)

    def action_edit_selected(self) -> None:
        selection = self._selection()
        if selection is None:
            self.notify("Select a config or a run first.", timeout=3)
            return
        kind, path = selection
        if kind == "config":
            self.app.load_into_builder(path)
        else:
            self.app.edit_run_config(path)

    def action_diagnose_selected(self) -> None:
        from probe_tui.app.screens.diagnose_start import diagnose_pressed

        diagnose_pressed(self)

    def action_run_selected(self) -> None:
        selection = self._selection()
        if selection is None or selection[0] != "config":
            self.notify("Select a config file to run (tab moves to the configs table).", timeout=3)
            return
        config = next((c for c in self.configs if c.path == selection[1]), None)
        if config is not None and config.valid is False:
            self.notify(f"{self._relative(config.path)} does not validate: {config.problem}", severity="error")
            return
        self.app.start_run(selection[1])


def first_run_text(where: str) -> Text:
    """What home says when it finds no run: three ways to start, one key each."""
    return Text.assemble(
        (f"No runs under {where} yet. Start here:\n", "bold"),
        ("  d", "bold"), "  run the demo: a tiny model on CPU, 4 steps, written to ./probe_dump\n",
        ("  p", "bold"), "  open a path: a run, a dump (msprobe's too), a compare result, a config\n",
        ("  n", "bold"), "  build a config: pick a task, fill in the form, ctrl+r runs it here",
    )


def _tail(text: str, width: int) -> str:
    """``text`` whole when it fits, else an ellipsis and its last ``width - 1`` characters."""
    return text if len(text) <= width else "…" + text[-(width - 1):]

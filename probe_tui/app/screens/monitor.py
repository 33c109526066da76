"""The live monitor: charts of a monitor run's metrics that move as the run writes them, a series picker with a
filter, a step window to zoom and pan, and the alert list (enter jumps to the series and step).

Data comes from :class:`~probe_tui.app.data.monitor_feed.MonitorFeed`, a thread paced by this screen's interval
timer, as :class:`MonitorScreen.Snapshot` messages applied under ``batch_update``. Space pauses the chart and the
alert list while the header keeps counting; the header says when the writer has finished or gone quiet.
"""

import math
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Input, Label, SelectionList, Static
from textual.widgets.selection_list import Selection

from probe_tui.app.actions import bindings_for
from probe_tui.app.data.alert_groups import SORTS, AlertGroups, row_key
from probe_tui.app.data.monitor_feed import MonitorFeed, MonitorSnapshot, SeriesData
from probe_tui.app.screens.base import AppScreen
from probe_tui.app.screens.monitor_ranks import MonitorRanks
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.widgets.find_table import FindTable
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.app.widgets.line_label import LineLabel, same_text
from probe_tui.app.widgets.metric_chart import MAX_LINES, MetricChart, picker_label
from probe_tui.app.widgets.rank_bar import RankBar
from probe_tui.formatting import number_text

POLL_S = 0.5
QUIET_S = 30.0
MAX_OPTIONS = 400
PICKER_TEXT = 29  # cells left for a series' name in the picker (36 wide) when it has not been laid out yet
ALERT_CONTEXT = 10  # steps shown each side of an alert's step after a jump


def alert_why(alert: dict) -> str:
    baseline = alert.get("baseline")
    value = alert.get("value")
    if alert.get("kind") in ("up", "down") and baseline and value is not None and math.isfinite(baseline):
        return "{} ×{:.3g} mean".format(alert["kind"], value / baseline)
    return str(alert.get("kind", ""))


class MonitorScreen(MonitorRanks, AppScreen):
    SCOPE = "monitor"
    CSS_PATH = "monitor.tcss"
    BINDINGS = bindings_for("monitor")

    class Snapshot(Message):
        def __init__(self, snapshot: MonitorSnapshot) -> None:
            super().__init__()
            self.snapshot = snapshot

    def __init__(self, path: Path, *, poll_s: float = POLL_S, quiet_s: float = QUIET_S) -> None:
        super().__init__()
        self.path = Path(path)
        self.poll_s = poll_s
        self.quiet_s = quiet_s
        self.feed: Optional[MonitorFeed] = None
        self.poll_timer: Optional[Timer] = None
        self.paused = False
        self.log_y = False
        self.status = "opening"
        self.snapshots = 0
        self.series_keys: List[str] = []
        self.selected: List[str] = []
        self.picked = False  # the user chose the series: the feed's default no longer applies
        self.data: Dict[str, SeriesData] = {}
        self.alerts: List[dict] = []
        self.shown_alerts = 0
        self.alert_groups = AlertGroups()
        self.alert_sort = SORTS[0]
        self.last_step: Optional[int] = None
        self.collected = 0
        self.window_width: Optional[int] = None
        self.window_end: Optional[int] = None  # None: follow the newest step
        self.mark_step: Optional[int] = None
        self.chart_draws = 0
        self.quiet_for = 0.0
        self._filling_picker = False
        self._listed_for: Optional[str] = None
        """The filter text the picker's list was made for (new series are added to it as they come)."""
        self._matched = 0
        self.latest: Dict[int, Tuple[int, float]] = {}
        """Per rank, (step, value) of the first charted series where it was read."""
        self.init_ranks()

    # ---- layout -------------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="mon-title-bar"):
            yield Static(Text.assemble(("Monitor", "bold"), " · " + relative_text(self.path, self.app.root)),
                         id="mon-title")
            yield Label("", id="mon-status")
        yield LineLabel("", id="mon-info")
        yield RankBar()
        with Horizontal(id="mon-body"):
            with Vertical(id="mon-picker"):
                yield Input(placeholder="filter series", id="series-filter")
                yield SelectionList[str](id="series-list")
                yield LineLabel("", id="picker-note")
            with Vertical(id="mon-main"):
                yield MetricChart(id="chart")
                yield LineLabel("Alerts", id="alerts-title", classes="pane-title")
                yield FindTable(id="alerts", counter="#alerts-title", title="Alerts (none yet)",
                                filters=self._alert_filters())
        yield KeyFooter()

    def on_mount(self) -> None:
        self._alert_columns()
        self._show_status()
        self.feed = MonitorFeed(self.path, lambda snap: self.post_message(self.Snapshot(snap)))
        self.feed.start()
        self.feed.schedule()
        self.poll_timer = self.set_interval(self.poll_s, self._tick)
        self.query_one("#alerts", DataTable).focus()

    def _tick(self) -> None:
        if self.feed is not None:
            self.feed.schedule()
        self._show_status()

    def on_unmount(self) -> None:
        if self.feed is not None:
            self.feed.stop()

    # ---- snapshots ----------------------------------------------------------------------------------------
    @on(Snapshot)
    def _snapshot(self, message: "MonitorScreen.Snapshot") -> None:
        snap = message.snapshot
        self.snapshots += 1
        if snap.status == "waiting":
            self.status = "waiting"
            self.query_one("#chart", MetricChart).message = "waiting for the run's metrics store…"
            self._show_status()
            return
        if snap.error:
            self.status = "error"
            self._show_status()
            self.notify(snap.error, severity="error", title="Monitor")
            return
        self.status = snap.status
        self.quiet_for = snap.quiet_s
        self.last_step, self.collected = snap.last_step, snap.collected_steps
        self.alerts.extend(snap.new_alerts)
        self.take_ranks(snap)
        with self.app.batch_update():
            if snap.series is not None:  # series only ever get added: the picker grows in place
                new = [s.key for s in snap.series[len(self.series_keys):]]
                self.series_keys = [s.key for s in snap.series]
                self._add_to_picker(new)
            if not self.picked and snap.selected and snap.selected != self.selected:
                self.selected = list(snap.selected)  # the default series, which grows as the store does
                self._mark_selected()
            self.data = snap.data
            if not self.paused:
                self._draw()
                self._add_alerts()
                self.show_rank_bar()
            self._show_status()
        if snap.status not in ("running", "waiting", "error") and self.poll_timer is not None:
            # the writer has ended: nothing more will come, stop polling (a finished run's view costs no CPU);
            # the feed still answers a new selection or rank at once (it wakes on them)
            self.poll_timer.stop()
            self.poll_timer = None

    def _state(self) -> Tuple[str, str]:
        """(text, style) of the badge: live, quiet, finished, failed, paused."""
        if self.status == "opening":
            return "opening…", themed("warning")
        if self.status == "waiting":
            return "waiting for metrics…", themed("warning")
        if self.status == "error":
            return "cannot read", themed("bold error")
        if self.status == "running":
            if self.quiet_for >= self.quiet_s:
                return "quiet {:.0f} s (no new step)".format(self.quiet_for), themed("bold warning")
            return "● live", themed("bold success")
        if self.status == "finished":
            return "writer finished", themed("bold info")
        return "writer {}".format(self.status), themed("bold error")

    def _show_status(self) -> None:
        text, style = self._state()
        badge = Text(" " + text + " ", style=style)
        if self.paused:
            badge = Text.assemble((" ⏸ paused ", themed("bold reverse warning")), " ", badge)
        status = self.query_one("#mon-status", Label)
        if not same_text(status.content, badge):  # every poll and key shows it; as wide as its text
            status.update(badge, layout=status.content_size.width != badge.cell_len)
        step = "—" if self.last_step is None else str(self.last_step)
        window = "all steps" if self.window_width is None else "{} steps".format(self.window_width)
        window += " (following)" if self.window_end is None else " (from step {})".format(self._window()[0])
        parts = ["step " + step, "{:,} collected".format(self.collected), "{:,} series".format(len(self.series_keys)),
                 "{:,} alerts".format(len(self.alerts)), "window: " + window]
        if self.log_y:
            parts.append("log y")
        self.query_one("#mon-info", LineLabel).set_text(Text("  ·  ".join(parts), style="dim"))

    # ---- chart --------------------------------------------------------------------------------------------
    def _window(self) -> Tuple[int, int]:
        newest = self.last_step if self.last_step is not None else 0
        if self.window_width is None:
            return 0, max(newest, 1)
        end = newest if self.window_end is None else self.window_end
        return max(0, end - self.window_width), end

    def _draw(self) -> None:
        chart = self.query_one("#chart", MetricChart)
        series = {k: ((d.steps, d.values) if d.low is None else (d.steps, d.values, d.low, d.high))
                  for k, d in self.data.items()}
        window = None if self.window_width is None else self._window()
        chart.message = "waiting for the first step…" if self.status in ("running", "opening") else "no data"
        chart.show(series, window=window, log=self.log_y, mark_step=self.mark_step, order=self.selected)
        self.chart_draws += 1

    def _redraw(self) -> None:
        if not self.paused:
            self._draw()
        self._show_status()

    def action_zoom_in(self) -> None:
        self.zoom(0.5)

    def action_zoom_out(self) -> None:
        self.zoom(2.0)

    def zoom(self, factor: float) -> None:
        full = max(2, (self.last_step or 0) + 1)
        width = self.window_width or full
        width = int(max(2, round(width * factor)))
        self.window_width = None if width >= full else width
        self._redraw()

    def action_pan(self, direction: int) -> None:
        if self.window_width is None:
            return
        lo, hi = self._window()
        end = hi + direction * max(1, self.window_width // 2)
        newest = self.last_step or 0
        self.window_end = None if end >= newest else max(self.window_width, end)
        self._redraw()

    def action_all_steps(self) -> None:
        self.window_width, self.window_end, self.mark_step = None, None, None
        self._redraw()

    def action_toggle_log(self) -> None:
        self.log_y = not self.log_y
        self._redraw()

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self._draw()
            self._add_alerts()
        self._show_status()
        self.refresh_bindings()

    # ---- series picker ------------------------------------------------------------------------------------
    def _fill_picker(self) -> None:
        matches = self._matches(self.series_keys)
        shown = matches[:MAX_OPTIONS]
        listing = self.query_one("#series-list", SelectionList)
        self._filling_picker = True
        try:
            listing.clear_options()
            listing.add_options([self._option(k) for k in shown])
            if shown:
                listing.highlighted = 0
        finally:
            self._filling_picker = False
        self._matched = len(matches)
        self._listed_for = self._filter_text()
        self._picker_note()

    def _option(self, key: str) -> Selection:
        listing = self.query_one("#series-list", SelectionList)
        width = listing.scrollable_content_region.width - 5 if listing.size.width else 0
        return Selection(picker_label(key, width if width >= 12 else PICKER_TEXT), key, key in self.selected)

    def _filter_text(self) -> str:
        return self.query_one("#series-filter", Input).value.strip().lower()

    def _matches(self, keys: List[str]) -> List[str]:
        pattern = self._filter_text()
        return [k for k in keys if pattern in k.lower()] if pattern else list(keys)

    def _add_to_picker(self, keys: List[str]) -> None:
        listing = self.query_one("#series-list", SelectionList)
        matches = self._matches(keys)
        room = max(0, MAX_OPTIONS - listing.option_count)
        self._filling_picker = True
        try:
            listing.add_options([self._option(k) for k in matches[:room]])
            if listing.highlighted is None and listing.option_count:
                listing.highlighted = 0
        finally:
            self._filling_picker = False
        self._matched += len(matches)
        self._picker_note()

    def _mark_selected(self) -> None:
        listing = self.query_one("#series-list", SelectionList)
        self._filling_picker = True
        try:
            listing.deselect_all()
            for key in self.selected:
                try:
                    listing.select(key)
                except Exception:  # not listed under the current filter
                    pass
        finally:
            self._filling_picker = False
        self._picker_note()

    @on(Input.Changed, "#series-filter")
    def _filter_changed(self, _: Input.Changed) -> None:
        if self._filter_text() != self._listed_for:  # (enter on an alert lists its module's series as it sets
            self._fill_picker()                      # the filter: the Changed that follows lists nothing new)

    @on(Input.Submitted, "#series-filter")
    def _filter_submitted(self, _: Input.Submitted) -> None:
        self.query_one("#series-list", SelectionList).focus()

    @on(SelectionList.SelectionToggled, "#series-list")
    def _toggled(self, event: SelectionList.SelectionToggled) -> None:
        if self._filling_picker:
            return
        key = event.selection.value
        if key in self.selected:
            self.selected.remove(key)
        elif len(self.selected) >= MAX_LINES:
            self.notify("At most {} series at once: untick one first.".format(MAX_LINES), timeout=3)
            event.selection_list.deselect(key)
            return
        else:
            self.selected.append(key)
        self._select(self.selected)

    def _select(self, keys: List[str]) -> None:
        self.selected = list(keys)
        self.picked = True
        if self.feed is not None:
            self.feed.select(self.selected)
        self._picker_note()

    def _picker_note(self) -> None:
        more = " (first {})".format(MAX_OPTIONS) if self._matched > MAX_OPTIONS else ""
        self.query_one("#picker-note", LineLabel).set_text(Text("{:,} of {:,} series{} · {} charted".format(
            self._matched, len(self.series_keys), more, len(self.selected)), style="dim"))

    def action_pick_series(self) -> None:
        picker = self.query_one("#mon-picker")
        if self.app.has_class("narrow"):
            picker.toggle_class("shown")
            if not picker.has_class("shown"):
                self.query_one("#alerts", DataTable).focus()
                return
        self.query_one("#series-filter", Input).focus()

    # ---- alerts -------------------------------------------------------------------------------------------
    def _alert_filters(self) -> List[Tuple[str, Callable[[str], bool]]]:
        def bad(key: str) -> bool:
            group = self.alert_groups.find(key)
            return group is not None and math.isinf(group.worst_severity)

        def many(key: str) -> bool:
            group = self.alert_groups.find(key)
            return group is not None and group.count > 1

        return [("NaN/inf", bad), ("repeated", many)]

    def _add_alerts(self) -> None:
        """Group the alerts that came since the last look and show the groups (one row per rule and module)."""
        table = self.query_one("#alerts", FindTable)
        new = self.alerts[self.shown_alerts:]
        self.shown_alerts = len(self.alerts)
        if not self.alert_groups.add(new) and table.source:
            return
        self._fill_alerts()

    def _fill_alerts(self) -> None:
        table = self.query_one("#alerts", FindTable)
        alerts = self.alert_groups.alerts
        rows = []
        for group in self.alert_groups.ordered(self.alert_sort):
            worst = alerts[group.worst]
            style = themed("bold error") if math.isinf(group.worst_severity) else ""
            where = [group.key[0]] if self.rank_column else []
            rows.append((row_key(group), [str(group.first_step), *where, Text(group.key[2], style=style),
                                          group.key[1], "{:,}".format(group.count), number_text(worst.get("value")),
                                          alert_why(worst), ", ".join(group.metrics)]))
        table.title = ("Alerts (by {}) · enter charts one".format(self.alert_sort) if rows else "Alerts (none yet)")
        table.set_rows(rows)

    def action_sort_alerts(self) -> None:
        self.alert_sort = SORTS[(SORTS.index(self.alert_sort) + 1) % len(SORTS)]
        self._fill_alerts()

    def action_focus_alerts(self) -> None:
        self.query_one("#alerts", DataTable).focus()

    @on(DataTable.RowSelected, "#alerts")
    def _alert_selected(self, event: DataTable.RowSelected) -> None:
        group = self.alert_groups.find(str(event.row_key.value))
        if group is not None:
            self.jump_to_alert(group.first)

    def jump_to_alert(self, n: int) -> None:
        """Chart the alert's series around its step, list its module's series in the picker."""
        alert = self.alert_groups.alerts[n]
        key = "{}/{}/{}".format(alert.get("tag"), alert.get("name"), alert.get("metric"))
        step = int(alert.get("step", 0))
        keys = [k for k in self.selected if k != key][: MAX_LINES - 1] + [key]
        self._select(keys)
        rank = alert.get("rank")
        if self.multi_rank and rank is not None and rank != self.rank:  # drill down to the rank that alerted
            self.choose_rank(int(rank))
        self.mark_step = step
        self.window_width = 2 * ALERT_CONTEXT
        self.window_end = step + ALERT_CONTEXT if (self.last_step or 0) > step + ALERT_CONTEXT else None
        module = str(alert.get("module") or alert.get("name") or "")
        self.query_one("#series-filter", Input).value = module
        self._fill_picker()
        self._redraw()
        where = "rank {} · ".format(alert.get("rank")) if self.multi_rank else ""
        self.notify("{}step {} · {}".format(where, step, key), timeout=3, title="Alert")

    # ---- leaving ------------------------------------------------------------------------------------------
    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        focused = self.app.focused
        if isinstance(focused, (Input, SelectionList)):
            if self.app.has_class("narrow"):
                self.query_one("#mon-picker").remove_class("shown")
            self.query_one("#alerts", DataTable).focus()
            return
        self.dismiss()

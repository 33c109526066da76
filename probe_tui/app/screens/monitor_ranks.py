"""The live monitor across ranks: the charted series as their min, mean and max over every rank (the rank bar
reads out the newest step, naming the ranks that hold the min and the max), a drill-down to one rank (``R``,
``<`` / ``>``, or enter on an alert of another rank), and a rank column in the alert list.

Mixed into :class:`~probe_tui.app.screens.monitor.MonitorScreen`, which holds the feed, the data and the alerts.
"""

from typing import Any, Dict, List, Optional, Tuple

from rich.text import Text
from textual.widgets import DataTable

from probe_tui.app.data.monitor_feed import MonitorSnapshot, SeriesData
from probe_tui.app.ranks import RankSelector
from probe_tui.app.styles import themed
from probe_tui.app.widgets.metric_chart import short_key
from probe_tui.formatting import number_text

ALERT_COLUMNS = (("first", 6), ("module", 28), ("rule", 17), ("count", 6), ("worst", 10), ("why", 14),
                 ("metrics", 24))
RANK_ALERT_COLUMNS = (("first", 6), ("rank", 4), ("module", 24), ("rule", 17), ("count", 6), ("worst", 10),
                      ("why", 14), ("metrics", 24))


class MonitorRanks(RankSelector):
    feed: Any
    data: Dict[str, SeriesData]
    selected: List[str]
    alerts: List[dict]
    latest: Dict[int, Tuple[int, float]]
    shown_alerts: int

    rank_column = False
    """The alert list has a rank column (a run of several ranks)."""

    def _alert_columns(self) -> None:
        table = self.query_one("#alerts", DataTable)  # type: ignore[attr-defined]
        table.clear(columns=True)
        for label, width in (RANK_ALERT_COLUMNS if self.rank_column else ALERT_COLUMNS):
            table.add_column(label, width=width, key=label)

    def take_ranks(self, snap: MonitorSnapshot) -> None:
        """The ranks a snapshot found: the first time there are several, the rank bar appears, the alert list
        gets its rank column and the feed is told the rank chosen earlier for this run."""
        if snap.ranks and list(snap.ranks) != self.ranks:
            self.setup_ranks(snap.ranks)
            if self.multi_rank and not self.rank_column:
                self.rank_column = True
                self._alert_columns()
                self._fill_alerts()  # type: ignore[attr-defined]  # again, with their rank
            if self.feed is not None and snap.rank != self.rank:
                self.feed.set_rank(self.rank)
        if snap.rank == self.rank or not self.multi_rank:
            self.latest.update(snap.latest)

    def rank_changed(self) -> None:
        """Chart the chosen rank (every rank's min/mean/max for None): the feed reads it at its next tick."""
        if self.feed is not None:
            self.feed.set_rank(self.rank)
        self.data = {}
        self._draw()  # type: ignore[attr-defined]

    def _readout(self) -> Text:
        """The first charted series at its newest step: min (rank), mean, max (rank) across ranks, or its value."""
        key = next((k for k in self.selected if k in self.data), None)
        series = self.data.get(key) if key else None
        if series is None or not len(series.steps):
            return Text("")
        i = len(series.steps) - 1
        text = Text.assemble((short_key(key, 28), "bold"), " @{} ".format(int(series.steps[i])))
        if series.low is None:
            text.append(number_text(series.values[i]))
            return text
        text.append("min {} (r{}) · mean {} · max {} (r{})".format(
            number_text(series.low[i], 3), int(series.low_rank[i]), number_text(series.values[i], 3),
            number_text(series.high[i], 3), int(series.high_rank[i])))
        if series.bad is not None and int(series.bad[i]):
            text.append(" · {} non-finite".format(int(series.bad[i])), style=themed("bold error"))
        return text

    def rank_note(self) -> Text:
        readout = self._readout()
        if self.rank is None and not readout.plain:
            return Text("min · mean · max over the ranks", style="dim")
        return readout

    def every_rank_entry(self) -> Text:
        return Text("each series as its min, mean and max over the ranks", style="dim")

    def rank_entries(self) -> List[Tuple[int, Text]]:
        """Per rank: the newest value read of the first charted series, and its alerts."""
        counts: Dict[Optional[int], int] = {}
        for alert in self.alerts:
            counts[alert.get("rank")] = counts.get(alert.get("rank"), 0) + 1
        key = self.selected[0] if self.selected else ""
        entries = []
        for rank in self.ranks:
            note = Text("")
            if rank in self.latest:
                step, value = self.latest[rank]
                note.append("{} @{} = {}".format(short_key(key, 28), step, number_text(value)), style="dim")
            if counts.get(rank):
                note.append("  {} alert{}".format(counts[rank], "" if counts[rank] == 1 else "s"), style=themed("bold error"))
            entries.append((rank, note))
        return entries

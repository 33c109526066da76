"""The live monitor: charts that move while a run writes its metrics store, alerts as they happen, pause,
writer-finished and went-quiet states, zoom, the series picker, and a real monitored demo run."""

import json
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest
from textual.widgets import DataTable, Input, SelectionList

from probe_tui.app.app import ProbeApp
from probe_tui.app.screens.monitor import MonitorScreen
from probe_tui.app.screens.run import RunScreen
from tests.app_pilot import MetricsRun, count_layouts, make_metrics, pilot_test, wait_until

ROOT = Path(__file__).resolve().parents[1]


def badge(screen) -> str:
    return screen._state()[0]


async def monitor(pilot, path, **options):
    from probe_tui.app.screens.home import HomeScreen

    await wait_until(pilot, lambda: isinstance(pilot.app.screen, HomeScreen))
    screen = MonitorScreen(path, **options)
    await pilot.app.push_screen(screen)
    return screen


@asynccontextmanager
async def monitoring(tmp_path, size=(120, 40), **options):
    """The app on ``tmp_path``, the monitor open on ``tmp_path/run`` (polling every 0.1 s): (pilot, screen)."""
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=size) as pilot:
        yield pilot, await monitor(pilot, tmp_path / "run", poll_s=0.1, **options)


@pilot_test
async def test_an_alert_appears_while_the_run_writes_and_the_writer_finishing_is_shown(tmp_path):
    run = MetricsRun(tmp_path / "run")
    for _ in range(4):
        run.step()
    async with monitoring(tmp_path) as (pilot, screen):
        await wait_until(pilot, lambda: screen.last_step == 3, what="the first four steps")
        assert badge(screen) == "● live"
        assert screen.selected == ["train/loss/value"]  # the default chart: the loss
        assert len(screen.series_keys) == 3
        draws = screen.chart_draws
        run.step()
        await wait_until(pilot, lambda: screen.last_step == 4 and screen.chart_draws > draws, what="chart moved")
        alerts = screen.query_one("#alerts", DataTable)
        assert alerts.row_count == 0
        run.step(spike=True)  # block 1's gradient norm x1000 at step 5
        await wait_until(pilot, lambda: alerts.row_count == 1, what="the alert row")
        row = [str(c) for c in alerts.get_row_at(0)]
        assert row[:5] == ["5", "blocks.1.fc", "AnomalyTurbulence", "1", "390.4"]
        assert row[5].startswith("up ×") and row[6] == "grad_reduced norm"
        assert badge(screen) == "● live"  # still writing
        run.close()
        await wait_until(pilot, lambda: badge(screen) == "writer finished")


@pilot_test
async def test_enter_on_an_alert_charts_its_series_around_its_step(tmp_path):
    make_metrics(tmp_path / "run", steps=40, spike_at=30)
    async with monitoring(tmp_path) as (pilot, screen):
        alerts = screen.query_one("#alerts", DataTable)
        await wait_until(pilot, lambda: alerts.row_count == 1 and screen.last_step == 39)
        alerts.focus()
        await pilot.press("enter")
        key = "grad_reduced/blocks.1.fc.weight/norm"
        await wait_until(pilot, lambda: key in screen.data, what="the alert's series read")
        assert screen.selected[-1] == key and screen.mark_step == 30
        lo, hi = screen._window()
        assert hi - lo == 20 and lo < 30 < hi
        assert screen.query_one("#series-filter", Input).value == "blocks.1.fc"
        listing = screen.query_one("#series-list", SelectionList)
        assert [listing.get_option_at_index(i).value for i in range(listing.option_count)] == [key]
        assert key in listing.selected
        await pilot.press("0")  # every step again
        await wait_until(pilot, lambda: screen.window_width is None and screen.mark_step is None)


@pilot_test
async def test_pause_freezes_the_chart_while_the_header_keeps_counting(tmp_path):
    run = MetricsRun(tmp_path / "run")
    run.step()
    async with monitoring(tmp_path, size=(100, 30)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.last_step == 0)
        await pilot.press("space")
        assert screen.paused
        draws = screen.chart_draws
        run.step()
        run.step(spike=True)
        await wait_until(pilot, lambda: screen.last_step == 2, what="the header counted on")
        assert screen.chart_draws == draws and screen.query_one("#alerts", DataTable).row_count == 0
        assert len(screen.alerts) == 1  # kept for later
        await pilot.press("space")
        await wait_until(pilot, lambda: screen.query_one("#alerts", DataTable).row_count == 1)
        assert screen.chart_draws > draws
        run.close()


@pilot_test
async def test_a_writer_that_goes_quiet_is_said_so(tmp_path):
    run = MetricsRun(tmp_path / "run")
    run.step()
    async with monitoring(tmp_path, size=(100, 30), quiet_s=0.5) as (pilot, screen):
        await wait_until(pilot, lambda: badge(screen).startswith("quiet"), what="the quiet state")
        run.step()
        await wait_until(pilot, lambda: badge(screen) == "● live")
        run.close()


@pilot_test
async def test_zoom_pan_log_and_the_series_picker(tmp_path):
    make_metrics(tmp_path / "run", steps=40, spike_at=100)
    async with monitoring(tmp_path) as (pilot, screen):
        await wait_until(pilot, lambda: screen.last_step == 39)
        await pilot.press("plus")
        assert screen.window_width == 20 and screen._window() == (19, 39)
        await pilot.press("left_square_bracket")
        assert screen._window() == (9, 29) and screen.window_end == 29
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert screen.window_end is None  # back to following the newest step
        await pilot.press("minus")
        assert screen.window_width is None
        await pilot.press("l")
        assert screen.log_y
        await pilot.press("s")
        await pilot.press(*"blocks.0")
        listing = screen.query_one("#series-list", SelectionList)
        await wait_until(pilot, lambda: listing.option_count == 1)
        listing.focus()
        await pilot.press("space")  # tick it
        key = "grad_reduced/blocks.0.fc.weight/norm"
        await wait_until(pilot, lambda: key in screen.data, what="the ticked series read")
        assert screen.selected == ["train/loss/value", key]
        assert len(screen.data[key].steps) == 40


@pilot_test
async def test_the_live_monitor_of_a_running_demo(tmp_path):
    """A real monitored demo run started from the app: o on its run screen opens the live monitor while it runs;
    the chart moves and alerts arrive as the run writes them."""
    pytest.importorskip("torch")
    config = json.loads((ROOT / "sample_configs" / "monitor.json").read_text())
    # long enough to be still running when the view first reads it on a loaded machine: 400 steps last ~2 s here,
    # and a CI run saw the chart never move while running (most likely the run had ended first); s stops it below
    config["target"]["demo"].update({"steps": 20000, "faults": {"grad_explosion": {"step": 20, "layer": 1,
                                                                                   "scale": 10000.0}}})
    config["monitor"]["format"] = ["hdf5"]
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(config))
    app = ProbeApp(tmp_path, root_label="~/exp")  # the real `python -m probe_tui --run CONFIG --events -`
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "scanned", False))
        app.start_run(path)
        run_screen = app.screen
        assert isinstance(run_screen, RunScreen)
        await wait_until(pilot, lambda: run_screen.status == "running" and run_screen.run_dir is not None,
                         timeout=120, what="the run started")
        await wait_until(pilot, lambda: (Path(tmp_path) / run_screen.run_dir / "rank0").is_dir(), timeout=60)
        await pilot.press("o")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen, timeout=30)
        await wait_until(pilot, lambda: screen.last_step is not None, timeout=60, what="a first step")
        first = screen.last_step
        await wait_until(pilot, lambda: screen.last_step > first and screen.status == "running", timeout=60,
                         what="the chart moving")
        alerts = screen.query_one("#alerts", DataTable)
        await wait_until(pilot, lambda: alerts.row_count > 0, timeout=90, what="an alert")
        # earlier alerts (activation turbulence in the first steps) may come first; the explosion's must follow
        await wait_until(pilot, lambda: any(a["step"] >= 20 and a["name"].startswith("blocks.1")
                                            for a in screen.alerts), timeout=90, what="the step-20 explosion alert")
        assert alerts.row_count == len(screen.alert_groups.groups)
        await pilot.press("escape")  # back to the run screen; stop the run
        await wait_until(pilot, lambda: app.screen is run_screen)
        await pilot.press("s")
        await wait_until(pilot, lambda: run_screen.finished_at is not None, timeout=60, what="the run stopped")


@pilot_test
async def test_opened_before_the_loss_is_written_the_chart_takes_the_loss_when_it_comes(tmp_path):
    """Right after launch the store may hold the gradient norms only (the loss is reported after the backward
    pass): the default chart must pick the loss up once it appears, as long as the user has not picked."""
    run = MetricsRun(tmp_path / "run")
    norms = MetricsRun.KEYS[1:]
    run.writer.write_step(0, norms, np.array([0.5, 0.4]))
    async with monitoring(tmp_path) as (pilot, screen):
        await wait_until(pilot, lambda: screen.last_step == 0, what="the first step")
        assert screen.selected == ["grad_reduced/blocks.0.fc.weight/norm"]
        run.writer.write_step(1, MetricsRun.KEYS, np.array([6.9, 0.5, 0.4]))
        await wait_until(pilot, lambda: "train/loss/value" in screen.data, what="the loss charted")
        assert screen.selected == ["train/loss/value"]
        listing = screen.query_one("#series-list", SelectionList)
        assert listing.selected == ["train/loss/value"]
        run.close()


@pilot_test
async def test_alerts_group_by_rule_and_module_sort_search_filter_and_jump(tmp_path):
    """Thousands of alerts are mostly one module tripping one rule again and again: one row per rule and module
    (first step, count, worst value), ordered by first step, searchable, filterable, enter charts the first."""
    run = MetricsRun(tmp_path / "run")
    for n in range(30):
        run.step(spike=n in (9, 20, 25))
    run.close()
    async with monitoring(tmp_path) as (pilot, screen):
        alerts = screen.query_one("#alerts", DataTable)
        await wait_until(pilot, lambda: screen.last_step == 29 and alerts.row_count >= 1)
        assert len(screen.alerts) >= 2
        assert alerts.row_count == 1  # one rule, one module
        row = [str(c) for c in alerts.get_row_at(0)]
        assert row[0] == "9" and row[1] == "blocks.1.fc" and row[3] == str(len(screen.alerts))
        title = screen.query_one("#alerts-title").render()
        assert "1 row" in str(title) and "first step" in str(title)
        alerts.focus()
        await pilot.press("o")
        assert screen.alert_sort == "count"
        await pilot.press("slash", *"blocks.0")
        await wait_until(pilot, lambda: alerts.row_count == 0, what="the search hides the row")
        assert "0 of 1 row" in str(screen.query_one("#alerts-title").render())
        await pilot.press("escape")
        await wait_until(pilot, lambda: alerts.row_count == 1 and screen.focused is alerts)
        await pilot.press("f")  # NaN/inf only: a spike is not
        assert alerts.row_count == 0 and "filter: NaN/inf" in str(screen.query_one("#alerts-title").render())
        await pilot.press("f", "f")  # repeated, then every group
        assert alerts.row_count == 1
        await pilot.press("enter")
        key = "grad_reduced/blocks.1.fc.weight/norm"
        await wait_until(pilot, lambda: key in screen.data, what="the alert's series read")
        assert screen.mark_step == 9 and screen._window()[0] < 9 < screen._window()[1]


@pilot_test
async def test_the_legend_is_a_line_of_its_own_under_the_plot(tmp_path):
    """plotext draws its legend over the data (it hid the step-40 spike): the chart keeps it out of the plot."""
    make_metrics(tmp_path / "run", steps=12, spike_at=2)
    async with monitoring(tmp_path) as (pilot, screen):
        await wait_until(pilot, lambda: screen.last_step == 11 and screen.data)
        chart = screen.query_one("#chart")
        lines = str(chart.render()).splitlines()
        assert len(lines) <= chart.size.height  # the legend line is not cut off
        assert "loss/value" in lines[-1]
        assert not any("loss/value" in line for line in lines[:-1])


def test_picker_labels_fit_and_tell_layers_apart():
    from probe_tui.app.widgets.metric_chart import picker_label

    keys = ["grad_reduced/model.layers.{}.self_attn.{}_proj.weight/norm".format(n, p)
            for n in (10, 11) for p in ("q", "k")]
    for width in (24, 29):
        labels = [picker_label(k, width).plain for k in keys]
        assert len(set(labels)) == len(keys)
        assert all(len(label) <= width for label in labels)
    assert picker_label("train/loss/value", 29).plain == "loss/value train"


@pilot_test
async def test_a_finished_run_stops_polling_but_still_answers_a_new_series(tmp_path):
    """A finished run's monitor kept polling its store (5-9 % CPU) for ever."""
    make_metrics(tmp_path / "run", steps=12)
    async with monitoring(tmp_path) as (pilot, screen):
        await wait_until(pilot, lambda: badge(screen) == "writer finished")
        assert screen.poll_timer is None
        seen = screen.snapshots
        await pilot.pause(0.6)  # six polls' worth
        assert screen.snapshots == seen
        key = "grad_reduced/blocks.0.fc.weight/norm"
        screen._select(["train/loss/value", key])
        await wait_until(pilot, lambda: key in screen.data, what="the new series read after the end")


@pilot_test
async def test_enter_on_an_alert_lists_the_picker_once(tmp_path, monkeypatch):
    """Enter on an alert lists its module's series as it sets the filter; the filter's Changed that follows
    listed the same series a second time."""
    make_metrics(tmp_path / "run", steps=40, spike_at=30)
    filled = []
    original = MonitorScreen._fill_picker

    def counted(self):
        filled.append(self.query_one("#series-filter", Input).value)
        return original(self)

    monkeypatch.setattr(MonitorScreen, "_fill_picker", counted)
    async with monitoring(tmp_path) as (pilot, screen):
        alerts = screen.query_one("#alerts", DataTable)
        await wait_until(pilot, lambda: alerts.row_count == 1 and screen.last_step == 39)
        alerts.focus()
        filled.clear()
        await pilot.press("enter")
        key = "grad_reduced/blocks.1.fc.weight/norm"
        await wait_until(pilot, lambda: key in screen.data, what="the alert's series read")
        await pilot.pause(0.2)
        assert filled == ["blocks.1.fc"]
        listing = screen.query_one("#series-list", SelectionList)
        assert [listing.get_option_at_index(i).value for i in range(listing.option_count)] == [key]
        screen.query_one("#series-filter", Input).value = "blocks"  # a new filter lists its series
        await wait_until(pilot, lambda: listing.option_count == 2, what="the picker listed for the new filter")


@pilot_test
async def test_an_unchanged_status_lays_nothing_out(tmp_path, monkeypatch):
    """Each poll (and each key) showed the status badge, the info line and the rank bar again with the same text:
    each update laid the screen out (~20 ms of CPU a key)."""
    layouts = count_layouts(monkeypatch, MonitorScreen)
    make_metrics(tmp_path / "run", steps=40, spike_at=30)
    async with monitoring(tmp_path) as (pilot, screen):
        await wait_until(pilot, lambda: screen.status == "finished" and screen.last_step == 39 and screen.alerts)
        await pilot.pause(0.3)
        layouts.clear()
        screen._show_status()  # what each poll does, the run unchanged
        screen.show_rank_bar()
        await pilot.pause(0.3)
        assert layouts == []

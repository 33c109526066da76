"""Every table searches (/), filters (f) and counts its rows (FindTable): home, alerts (tests/test_app_monitor.py),
grad compare, free_benchmark, overflow. A search keeps the views on the right row: they follow row keys."""

import shutil
from pathlib import Path

from textual.widgets import DataTable

from probe_tui.app.actions import SCOPE_TITLES
from probe_tui.app.app import ProbeApp
from probe_tui.app.screens.free_benchmark import FreeBenchmarkScreen
from probe_tui.app.screens.grad import GradScreen
from probe_tui.app.screens.home import HomeScreen
from tests.app_pilot import (
    make_free_benchmark_run,
    make_grad_result,
    open_view,
    pilot_test,
    rendered_text,
    wait_until,
)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_configs"


def _home_on_three_samples(folder):
    """The app on a folder holding three shipped sample configs (home's configs table: 3 rows)."""
    for name in ("statistics.json", "monitor.json", "tensor.json"):
        shutil.copy(SAMPLES / name, folder / name)
    return ProbeApp(folder, root_label="~/exp")


def title(screen, selector: str) -> str:
    return str(screen.query_one(selector).render())


@pilot_test
async def test_home_tables_search_and_count(tmp_path):
    app = _home_on_three_samples(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        screen = app.screen
        configs = screen.query_one("#configs", DataTable)
        await wait_until(pilot, lambda: configs.has_focus and configs.row_count == 3)
        assert "Configs · 3 rows" in title(screen, "#configs-title")
        await pilot.press("slash", *"monitor")
        await wait_until(pilot, lambda: configs.row_count == 1, what="the search narrowed the table")
        assert "Configs · 1 of 3 rows · search: monitor" in title(screen, "#configs-title")
        await pilot.press("enter")  # back to the table, the search kept
        await wait_until(pilot, lambda: configs.has_focus)
        assert screen._selection() == ("config", tmp_path / "monitor.json")
        await pilot.press("slash", "escape")  # escape in the search field clears it
        await wait_until(pilot, lambda: configs.row_count == 3 and configs.has_focus)
        assert "search" not in title(screen, "#configs-title")


@pilot_test
async def test_a_search_in_free_benchmark_keeps_the_detail_on_the_row_shown(tmp_path):
    run = make_free_benchmark_run(tmp_path / "fb")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, run, FreeBenchmarkScreen)
        checks = screen.query_one("#fb-checks", DataTable)
        await wait_until(pilot, lambda: checks.row_count == 3)
        await pilot.press("a")  # every check: 6
        await wait_until(pilot, lambda: checks.row_count == 6)
        checks.focus()
        await pilot.press("slash", *"linear", "enter")
        await wait_until(pilot, lambda: checks.row_count == 3)
        await pilot.press("down", "up")
        detail = screen.query_one("#fb-detail-body")
        await wait_until(pilot, lambda: "Functional.linear" in rendered_text(detail.content, 100),
                         what="the detail of the row shown, a linear's")
        assert "3 of 6 rows · search: linear" in title(screen, "#fb-table-title")


@pilot_test
async def test_filters_and_the_cut_columns_hint(tmp_path):
    result = make_grad_result(tmp_path / "grad")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_view(pilot, result, GradScreen)
        await wait_until(pilot, lambda: screen.result is not None)
        params = screen.query_one("#params", DataTable)
        await wait_until(pilot, lambda: params.row_count == 6)
        params.focus()
        await pilot.press("f")  # parameters that broke the rule
        await wait_until(pilot, lambda: params.row_count == 1)
        assert "filter: broken rule" in title(screen, "#params-title")
        assert str(params.get_row_at(0)[0]) == "blocks.1.fc.weight"
        await pilot.press("f")
        await wait_until(pilot, lambda: params.row_count == 6)
        # 80 columns cannot hold the parameter table's columns: the count says more are to the right
        await wait_until(pilot, lambda: "→ more columns" in title(screen, "#params-title"), what="the hint")


def test_help_of_a_screen_with_tables_lists_the_table_keys():
    from probe_tui.app.screens.help import help_tables

    assert [str(t.title) for t in help_tables("monitor")] == ["Live monitor", SCOPE_TITLES["table"], "Everywhere"]
    assert [str(t.title) for t in help_tables("acccheck")] == ["acc_check result", SCOPE_TITLES["table"], "Everywhere"]


@pilot_test
async def test_tab_then_x_typed_at_once_runs_the_config(tmp_path):
    """Keys that arrive together (a loaded machine, a fast typist) act in order: tab moves to the configs table
    before the next key is read, so x runs the config rather than complaining that no config is selected."""
    from textual import events

    from tests.app_pilot import make_compare_result

    make_compare_result(tmp_path / "cmp")  # a run row: home focuses the runs table
    shutil.copy(SAMPLES / "statistics.json", tmp_path / "statistics.json")
    app = ProbeApp(tmp_path, root_label="~/exp")
    started = []
    app.start_run = started.append  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        runs = app.screen.query_one("#runs", DataTable)
        await wait_until(pilot, lambda: runs.has_focus)
        for key, char in (("tab", "\t"), ("x", "x")):  # both queued before the app reads the first
            event = events.Key(key, char)
            event.set_sender(app)
            app._driver.send_message(event)
        await wait_until(pilot, lambda: started, what="x ran the config tab moved to")
        assert started == [tmp_path / "statistics.json"]


@pilot_test
async def test_the_search_field_resizes_no_table(tmp_path):
    """The search field lies over the last line of the table's pane, one line high, on a layer of its own:
    opening it moves and resizes nothing (a table that shrinks draws all its rows again: a slow `/`)."""
    from probe_tui.app.widgets.find_table import FindInput

    app = _home_on_three_samples(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        screen = app.screen
        configs = screen.query_one("#configs", DataTable)
        await wait_until(pilot, lambda: configs.has_focus and configs.row_count == 3)
        await pilot.pause()
        before = configs.region
        await pilot.press("slash")
        field = await wait_until(pilot, lambda: next(iter(screen.query(FindInput)), None), what="the search field")
        await wait_until(pilot, lambda: field.has_focus and field.region.height > 0)
        assert configs.region == before
        pane = screen.query_one("#configs-pane").region
        assert field.region.height == 1 and field.region.bottom == pane.bottom
        await pilot.press(*"mon")
        await wait_until(pilot, lambda: configs.row_count == 1)
        assert field.value == "mon"

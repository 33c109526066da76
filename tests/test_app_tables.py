"""Every table searches (/), filters (f) and counts its rows (FindTable): home, alerts (tests/test_app_monitor.py),
grad compare, free_benchmark, overflow. A search keeps the views on the right row: they follow row keys."""

import shutil
from pathlib import Path

import pytest
from textual.widgets import DataTable
from textual.widgets.data_table import DuplicateKey

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


@pilot_test
async def test_a_fill_adds_its_rows_at_once_and_sets_the_cursor_once(monkeypatch):
    """A fill of 300 rows (an acc_check result opening: 338) set the cursor reactive once per row (``add_row``:
    validated, watched, with the ordered columns listed twice), about half of the fill's time; it now sets it
    once. The table is the same: its rows in order, their cells, the cursor on the first row, one highlight."""
    from textual.app import App

    from probe_tui.app.widgets.find_table import FindTable

    validated = []
    original = DataTable.validate_cursor_coordinate

    def counting(self, value):
        validated.append(value)
        return original(self, value)

    monkeypatch.setattr(DataTable, "validate_cursor_coordinate", counting)
    highlighted = []

    class One(App):
        def compose(self):
            yield FindTable(id="t")

        def on_data_table_row_highlighted(self, event):
            highlighted.append(event.row_key.value)

    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(FindTable)
        table.add_column("name", width=8, key="name")
        table.add_column("value", width=8, key="value")
        await pilot.pause()
        validated.clear()
        table.set_rows([(str(n), ["row {}".format(n), str(n * n)]) for n in range(300)])
        assert len(validated) <= 2, len(validated)  # was 300: one per row
        await pilot.pause()
        assert table.row_count == 300 and table.shown == 300
        assert [str(row.key.value) for row in table.ordered_rows] == [str(n) for n in range(300)]
        assert table.get_row("299") == ["row 299", str(299 * 299)]
        assert table.cursor_coordinate.row == 0 and highlighted == ["0"]
        table.move_cursor(row=5)
        table.search_for("row 1")  # 1, 10-19, 100-199: the cursor leaves row 5 for the first row shown
        await pilot.pause()
        assert table.shown == 111 and table.get_row_at(0) == ["row 1", "1"]
        table.search_for("")
        with pytest.raises(DuplicateKey):  # as add_row
            table.set_rows([(str(n), ["row {}".format(n), str(n)]) for n in range(3)] + [("0", ["again", "0"])])

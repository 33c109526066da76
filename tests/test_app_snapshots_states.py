"""SVG snapshots of the states issue 19 changed, at 80x24 and 120x40: an empty compare view, a failed run, a
monitor waiting for its store, the grouped alerts with a search open, the free_benchmark detail at 80x24, and
the 16-colour theme (warnings, errors and headings apart).

Regenerate after a deliberate change of looks with ``pytest tests/test_app_snapshots_states.py --snapshot-update``
and look at the report before committing the SVGs.
"""

from pathlib import Path

import pytest

from probe_tui.app.themes import apply_terminal_theme
from tests.app_pilot import make_compare_result, make_free_benchmark_run, wait_until
from tests.test_app_snapshots_views import SIZES, open_on, settle, snap_app


def compare_ready(screen) -> bool:
    return getattr(screen, "divergence", None) is not None and getattr(screen, "view", None) is not None


def alerts_ready(screen) -> bool:
    return getattr(screen, "last_step", None) == 29 and bool(getattr(screen, "shown_alerts", 0))


def spiky_metrics(folder: Path) -> Path:
    from tests.app_pilot import MetricsRun

    run = MetricsRun(folder)
    for n in range(30):
        run.step(spike=n in (9, 20, 25))
    run.close()
    return folder


@pytest.mark.parametrize("size", SIZES)
def test_compare_with_no_matching_row(snap_compare, tmp_path, size):
    result = make_compare_result(tmp_path)

    async def run_before(pilot):
        screen = await open_on(pilot, result, compare_ready)
        await screen.apply_view(search="no_such_op_anywhere")
        await settle(pilot)

    assert snap_app(snap_compare, tmp_path, size, run_before)


@pytest.mark.parametrize("size", SIZES)
def test_run_failed_before_its_folder(snap_compare, tmp_path, size):
    from probe_tui.app.screens.run import RunScreen

    async def run_before(pilot):
        await wait_until(pilot, lambda: getattr(pilot.app.screen, "scanned", False))
        screen = RunScreen(tmp_path / "compare.json", cwd=tmp_path, autostart=False)
        await pilot.app.push_screen(screen)
        events = [{"kind": "run_started", "run_dir": None, "task": "compare", "total_steps": None},
                  {"kind": "message", "level": "error", "text": "compare.target_path: no such folder"}]
        screen.post_message(RunScreen.ChildOutput(events, ["compare.target_path: no such folder"]))
        screen.post_message(RunScreen.ChildExited(2))
        await wait_until(pilot, lambda: screen.finished_at is not None)
        await settle(pilot)

    assert snap_app(snap_compare, tmp_path, size, run_before)


@pytest.mark.parametrize("size", SIZES)
def test_monitor_waiting_for_its_store(snap_compare, tmp_path, size):
    from probe_tui.app.screens.monitor import MonitorScreen

    (tmp_path / "run" / "rank0").mkdir(parents=True)

    async def run_before(pilot):
        await wait_until(pilot, lambda: getattr(pilot.app.screen, "scanned", False))
        screen = MonitorScreen(tmp_path / "run", poll_s=0.1)
        await pilot.app.push_screen(screen)
        await wait_until(pilot, lambda: screen.status == "waiting")
        await settle(pilot)

    assert snap_app(snap_compare, tmp_path, size, run_before)


@pytest.mark.parametrize("size", SIZES)
def test_monitor_alert_groups_with_a_search(snap_compare, tmp_path, size):
    run = spiky_metrics(tmp_path / "monitor_run")

    async def run_before(pilot):
        screen = await open_on(pilot, run, alerts_ready)
        screen.query_one("#alerts").focus()
        await pilot.press("slash", *"blocks")
        await settle(pilot)
        for field in screen.query("Input"):
            field.cursor_blink = False

    assert snap_app(snap_compare, tmp_path, size, run_before)


@pytest.mark.parametrize("size", SIZES)
def test_monitor_in_16_colours(snap_compare, tmp_path, size):
    run = spiky_metrics(tmp_path / "monitor_run")

    async def run_before(pilot):
        apply_terminal_theme(pilot.app, "standard")
        await open_on(pilot, run, alerts_ready)
        pilot.app.notify("a warning", severity="warning", timeout=60)
        pilot.app.notify("an error", severity="error", timeout=60)
        await settle(pilot)

    assert snap_app(snap_compare, tmp_path, size, run_before)


def test_free_benchmark_detail_at_80x24(snap_compare, tmp_path):
    path = make_free_benchmark_run(tmp_path / "free_benchmark_run")

    async def run_before(pilot):
        screen = await open_on(pilot, path, lambda s: getattr(s, "result", None) is not None)
        await pilot.press("tab")
        await wait_until(pilot, lambda: screen.query_one("#fb-detail").has_focus)
        await settle(pilot)

    assert snap_app(snap_compare, tmp_path, "80x24", run_before)


def test_home_empty_in_16_colours(snap_compare, tmp_path):
    async def run_before(pilot):
        apply_terminal_theme(pilot.app, "standard")
        await wait_until(pilot, lambda: getattr(pilot.app.screen, "scanned", False))
        await settle(pilot)

    assert snap_app(snap_compare, tmp_path, "80x24", run_before)

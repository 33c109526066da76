"""SVG snapshots of every screen at 80x24 and 120x40, on fixed fake data with fixed timestamps.

Regenerate after a deliberate change of looks with ``pytest tests/test_app_snapshots.py --snapshot-update`` and
look at the report before committing the SVGs.
"""

import json
import os
import time
from pathlib import Path

import pytest
from textual.widgets import Input, Label

import schemas
from probe_tui.app.app import ProbeApp

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
FIXED_MTIME = 1767607200  # 2026-01-05 10:00 UTC


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _run(root: Path, folder: str, run_id: str, task: str, status: str, started: str, steps: int, ranks: int,
         exit_code: int) -> None:
    path = root / folder / run_id
    path.mkdir(parents=True)
    meta = {"schema_version": 1, "run_id": run_id, "task": task, "framework": "pytorch",
            "config": schemas.dump_config(schemas.load_config(schemas.starter_config(task))), "status": status,
            "started": started, "started_unix": time.mktime(time.strptime(started[:19], "%Y-%m-%dT%H:%M:%S")),
            "host": "train-node-3", "pid": 4242, "exit_code": exit_code, "finished": started, "steps": steps,
            "ranks": list(range(ranks)), "summary": {"steps": steps}}
    (path / "run.json").write_text(json.dumps(meta, indent=2))
    for rank in range(ranks):
        (path / f"rank{rank}").mkdir()
        (path / f"rank{rank}" / "dump.h5").write_bytes(b"\0" * (40960 * (rank + 1)))
        (path / f"rank{rank}" / "construct.json").write_bytes(b"{}" * 300)


def make_fixture(root: Path) -> Path:
    """Three runs of different tasks and statuses, a valid and an invalid config."""
    _run(root, "probe_dump", "20260105-101500-a1b2c3", "statistics", "finished", "2026-01-05T10:15:00+00:00", 5, 1, 0)
    _run(root, "probe_dump", "20260105-093000-d4e5f6", "tensor", "stopped", "2026-01-05T09:30:00+00:00", 2, 2, 130)
    _run(root, "runs_bf16", "20260104-180000-0a0b0c", "overflow_check", "failed", "2026-01-04T18:00:00+00:00", 1, 1,
         1)
    (root / "stats.json").write_text(json.dumps(schemas.starter_config("statistics"), indent=2))
    (root / "broken.json").write_text(json.dumps({"task": "statistics", "level": "L9"}))
    for name in ("stats.json", "broken.json"):
        os.utime(root / name, (FIXED_MTIME, FIXED_MTIME))
    return root


def app_for(root: Path) -> ProbeApp:
    return ProbeApp(root, root_label="~/exp")


async def settle(pilot, condition=None, timeout=20.0):
    """Wait for workers and, optionally, a condition; then stop the cursor blinking."""
    loop = asyncio_loop()
    deadline = loop.time() + timeout
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    while getattr(pilot.app.screen, "building", False):  # the config builder mounts its form a screenful a step
        if loop.time() > deadline:
            raise AssertionError("the builder's form was not built")
        await pilot.pause(0.05)
    while condition is not None and not condition(pilot.app):
        if loop.time() > deadline:
            raise AssertionError("screen did not reach the expected state")
        await pilot.pause(0.05)
    await pilot.pause()
    while not table_counts_current(pilot.app):  # the "→ more columns" hint needs the table laid out first
        if loop.time() > deadline:
            raise AssertionError("a table's row count line was not brought up to date")
        await pilot.pause(0.05)
    for widget in pilot.app.screen.query(Input):
        widget.cursor_blink = False


def table_counts_current(app) -> bool:
    """Every table's count line says what the table, as laid out now, holds (rows, filter, cut columns)."""
    from probe_tui.app.widgets.find_table import FindTable

    for table in app.screen.query(FindTable):
        if table.counter is None or not table.size.width:
            continue
        try:
            label = app.screen.query_one(table.counter, Label)
        except Exception:
            continue
        if str(label.content) != (table.title + " · " if table.title else "") + table.count_text():
            return False
    return True


def asyncio_loop():
    import asyncio

    return asyncio.get_running_loop()


def home_ready(app):
    return getattr(app.screen, "scanned", False)


def home_then(*steps):
    """A ``run_before``: the home screen scanned, then each step (a key to press, or a function of the pilot),
    each followed by a settle."""

    async def run_before(pilot):
        await settle(pilot, home_ready)
        for step in steps:
            if isinstance(step, str):
                await pilot.press(step)
            else:
                step(pilot)
            await settle(pilot)

    return run_before


def snap(snap_compare, root: Path, size: str, run_before) -> bool:
    """The app on ``root`` at ``size``, after ``run_before``, against its stored snapshot."""
    return snap_compare(app_for(root), terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_home_empty(snap_compare, tmp_path, size):
    assert snap(snap_compare, tmp_path, size, home_then())


@pytest.mark.parametrize("size", SIZES)
def test_home_with_runs_and_configs(snap_compare, tmp_path, size):
    assert snap(snap_compare, make_fixture(tmp_path), size, home_then())


@pytest.mark.parametrize("size", SIZES)
def test_start_a_config(snap_compare, tmp_path, size):
    assert snap(snap_compare, tmp_path, size, home_then("n"))


@pytest.mark.parametrize("size", SIZES)
def test_builder_statistics(snap_compare, tmp_path, size):
    assert snap(snap_compare, tmp_path, size, home_then(lambda pilot: pilot.app.open_builder(
        schemas.starter_config("statistics"), path=None, origin="probe-tui init statistics")))


@pytest.mark.parametrize("size", SIZES)
def test_builder_with_errors(snap_compare, tmp_path, size):
    data = schemas.starter_config("statistics")
    data.update({"dump_path": "", "step": [0, "x"], "level": "L9"})
    steps = home_then(lambda pilot: pilot.app.open_builder(data, path=tmp_path / "stats.json"), "ctrl+n")
    assert snap(snap_compare, tmp_path, size, steps)


@pytest.mark.parametrize("size", SIZES)
def test_save_prompt(snap_compare, tmp_path, size):
    steps = home_then(lambda pilot: pilot.app.open_builder(schemas.starter_config("statistics"), path=None),
                      "ctrl+s")
    assert snap(snap_compare, make_fixture(tmp_path), size, steps)


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare, tmp_path, size):
    assert snap(snap_compare, tmp_path, size, home_then("f1"))


@pytest.mark.parametrize("size", SIZES)
def test_run_finished(snap_compare, tmp_path, size):
    from probe_tui.app.screens.run import RunScreen

    async def run_before(pilot):
        await settle(pilot, home_ready)
        screen = RunScreen(tmp_path / "stats.json", cwd=tmp_path, autostart=False)
        await pilot.app.push_screen(screen)
        run_dir = "probe_dump/20260105-101500-a1b2c3"
        events = [{"kind": "run_started", "run_dir": run_dir, "task": "statistics", "total_steps": 5},
                  {"kind": "message", "level": "warning", "text": "rank 1 has no data for step 0"}]
        events += [{"kind": "step", "step": s, "total_steps": 5, "loss": 6.9 - 0.1 * s, "elapsed_s": 0.2 * s,
                    "records": 180 * (s + 1), "bytes": 51200 * (s + 1)} for s in range(5)]
        events.append({"kind": "run_finished", "status": "finished", "exit_code": 0, "run_dir": run_dir,
                       "summary": {"steps": 5}})
        screen.post_message(RunScreen.ChildOutput(events, ["loading the demo model", "step 5/5 loss 6.5"]))
        screen.post_message(RunScreen.ChildExited(0))
        await settle(pilot, lambda app: screen.finished_at is not None)

    assert snap_compare(app_for(tmp_path), terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_run_summary(snap_compare, tmp_path, size):
    root = make_fixture(tmp_path)

    async def run_before(pilot):
        await settle(pilot, home_ready)
        pilot.app.open_path(root / "probe_dump" / "20260105-093000-d4e5f6")
        await settle(pilot, lambda app: getattr(app.screen, "summary", None) is not None)

    assert snap_compare(app_for(root), terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_confirm_unsaved(snap_compare, tmp_path, size):
    async def run_before(pilot):
        await settle(pilot, home_ready)
        pilot.app.open_builder(schemas.starter_config("statistics"), path=tmp_path / "stats.json")
        await settle(pilot)
        pilot.app.screen.form.rows["dump_path"].control.value = "./elsewhere"
        await pilot.pause(0.4)
        await pilot.press("escape")
        await settle(pilot)

    assert snap_compare(app_for(tmp_path), terminal_size=SIZES[size], run_before=run_before)

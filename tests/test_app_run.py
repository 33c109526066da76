"""The run screen and its child process: launched in its own session, followed through files, stopped cleanly.

These use a stand-in child that writes the same events as `probe-tui --run CONFIG --events -`; the real CLI on
the demo model is driven in test_app_flows.py.
"""

import asyncio
import functools
import json
import signal
import sys
import textwrap
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from probe_tui.app.child import ChildRun, LineTail, child_env, run_command
from probe_tui.app.screens.run import parse_event
from tests.app_pilot import wait_until

# A stand-in for `probe-tui --run CONFIG --events -` that writes the same events (used only in tests; the real
# CLI is driven in test_app_flows.py): argv = steps, seconds per step, mode (ok | crash | ignore-sigint | early-fail).
FAKE_RUN = textwrap.dedent('''
    import json, signal, sys, time
    steps, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    run_dir = "probe_dump/20260101-000000-abcdef"
    import os
    os.makedirs(run_dir + "/rank0", exist_ok=True)
    with open(run_dir + "/run.json", "w") as f:
        json.dump({"run_id": "20260101-000000-abcdef", "task": "statistics", "status": "running",
                   "config": {"task": "statistics", "target": "demo"}}, f)
    with open(run_dir + "/rank0/dump.h5", "wb") as f:
        f.write(b"x" * 2048)
    def emit(kind, **fields):
        print(json.dumps(dict(event=kind, **fields)), flush=True)
    if mode == "ignore-sigint":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:  # as the real runner does: SIGINT stops the run even when the shell started it with SIGINT ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if mode == "early-fail":  # an analysis job (no run folder before it ends) that fails at once
        emit("run_started", run_dir=None, task="compare", total_steps=None)
        print("compare: target_path: no such folder", file=sys.stderr, flush=True)
        sys.exit(2)
    emit("run_started", run_dir=run_dir, task="statistics", total_steps=steps)
    print("log: starting", file=sys.stderr, flush=True)
    done = 0
    try:
        for step in range(steps):
            time.sleep(delay)
            if mode == "crash" and step == 1:
                raise RuntimeError("boom in step 1")
            done += 1
            emit("step", step=step, total_steps=steps, loss=2.0 / (step + 1), elapsed_s=step * delay)
            print(f"log: step {step}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        emit("run_finished", status="stopped", exit_code=130, run_dir=run_dir, summary={"steps": done})
        sys.exit(130)
    emit("message", level="info", text="all done")
    emit("run_finished", status="finished", exit_code=0, run_dir=run_dir, summary={"steps": done})
''')


@pytest.fixture
def fake_run(tmp_path) -> Path:
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    return script


def _follow(child: ChildRun, timeout: float = 30.0, on_step=None):
    events, logs = [], []
    deadline = time.monotonic() + timeout

    def collect(event_lines, log_lines):
        for line in event_lines:
            events.append(parse_event(line))
            if on_step and events[-1]["kind"] == "step":
                on_step(events[-1])
        logs.extend(log_lines)

    code = child.follow(collect, cancelled=lambda: time.monotonic() > deadline)
    return code, events, logs


def test_the_command_is_the_headless_run_of_the_cli():
    assert run_command(Path("c.json"), python="py") == ["py", "-m", "probe_tui", "--run", "c.json", "--events", "-"]
    env = child_env()
    assert env["PYTHONUNBUFFERED"] == "1"
    assert str(Path(__file__).resolve().parents[1]) in env["PYTHONPATH"].split(":")


def test_a_run_is_followed_to_its_end(fake_run, tmp_path):
    child = ChildRun([sys.executable, str(fake_run), "3", "0.01", "ok"], cwd=tmp_path, launch_dir=tmp_path / "l")
    child.start()
    code, events, logs = _follow(child)
    assert code == 0
    assert [e["kind"] for e in events] == ["run_started", "step", "step", "step", "message", "run_finished"]
    assert events[-1]["status"] == "finished"
    assert logs == ["log: starting", "log: step 0", "log: step 1", "log: step 2"]


def test_a_crashing_run_reports_its_exit_code_and_traceback(fake_run, tmp_path):
    child = ChildRun([sys.executable, str(fake_run), "5", "0.01", "crash"], cwd=tmp_path, launch_dir=tmp_path / "l")
    child.start()
    code, events, logs = _follow(child)
    assert code == 1
    assert [e["kind"] for e in events] == ["run_started", "step"]
    assert any("RuntimeError: boom in step 1" in line for line in logs)


def test_stop_sends_sigint_and_the_run_ends_cleanly(fake_run, tmp_path):
    child = ChildRun([sys.executable, str(fake_run), "1000", "0.05", "ok"], cwd=tmp_path, launch_dir=tmp_path / "l")
    child.start()
    code, events, _ = _follow(child, on_step=lambda e: child.stop(grace_s=30) if e["step"] == 1 else None)
    assert code == 130
    assert events[-1]["kind"] == "run_finished" and events[-1]["status"] == "stopped"
    assert events[-1]["summary"]["steps"] >= 2  # completed steps are kept
    assert not child.running and not child.stop()


def test_a_run_that_ignores_sigint_gets_sigterm_after_the_grace_period(fake_run, tmp_path):
    child = ChildRun([sys.executable, str(fake_run), "1000", "0.05", "ignore-sigint"], cwd=tmp_path,
                     launch_dir=tmp_path / "l")
    child.start()
    code, events, _ = _follow(child, on_step=lambda e: child.stop(grace_s=0.3) if e["step"] == 0 else None)
    assert code == -signal.SIGTERM
    assert events[-1]["kind"] == "step"  # killed: no run_finished


def test_the_run_outlives_a_follower_that_goes_away(fake_run, tmp_path):
    """Following stops (the app left the screen or died); the child keeps running in its own session."""
    child = ChildRun([sys.executable, str(fake_run), "3", "0.2", "ok"], cwd=tmp_path, launch_dir=tmp_path / "l")
    child.start()
    assert child.follow(lambda e, lg: None, cancelled=lambda: True) is None
    assert child.running
    assert child.process.wait(timeout=30) == 0
    lines = (tmp_path / "l" / "events.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["status"] == "finished"


def test_line_tail_waits_for_complete_lines(tmp_path):
    path = tmp_path / "f"
    tail = LineTail(path)
    assert tail.read_lines() == []
    path.write_bytes(b"one\ntw")
    assert tail.read_lines() == ["one"]
    with open(path, "ab") as handle:
        handle.write(b"o\nthree")
    assert tail.read_lines() == ["two"]
    assert tail.flush() == ["three"]


# ---- the run screen ---------------------------------------------------------------------------------------------

def pilot_test(coro_fn):
    @functools.wraps(coro_fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(coro_fn(*args, **kwargs))

    return wrapper


async def start(pilot, app, config):
    """Start a run from the home screen; the run screen once it is up."""
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.run import RunScreen

    await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.is_mounted)
    app.start_run(config)
    return await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.is_mounted
                            and app.screen, what="the run screen")


def _app(tmp_path, fake_run, *args):
    from probe_tui.app.app import ProbeApp

    config = tmp_path / "stats.json"
    config.write_text('{"task": "statistics"}')
    return ProbeApp(tmp_path, root_label="~/exp", run_command=[sys.executable, str(fake_run), *args]), config


@asynccontextmanager
async def _running(tmp_path, fake_run, *args):
    """The app with the fake run (``args``: its steps, seconds a step, ending) started: (app, pilot, run screen)."""
    app, config = _app(tmp_path, fake_run, *args)
    async with app.run_test(size=(100, 30)) as pilot:
        yield app, pilot, await start(pilot, app, config)


def _text(screen, selector):
    return str(screen.query_one(selector).render())


@pilot_test
async def test_run_screen_shows_progress_and_opens_the_result(fake_run, tmp_path):
    from probe_tui.app.screens.summary import RunSummaryScreen

    async with _running(tmp_path, fake_run, "3", "0.05", "ok") as (app, pilot, screen):
        await wait_until(pilot, lambda: screen.status == "finished" and screen.finished_at is not None)
        assert _text(screen, "#info-step") == "3 / 3"
        assert _text(screen, "#info-dump") == "probe_dump/20260101-000000-abcdef"
        assert _text(screen, "#info-loss") == "0.6667"
        assert "finished" in _text(screen, "#run-status")
        log = "\n".join(str(line.text) for line in screen.query_one("#run-log").lines)
        assert "log: step 2" in log
        assert screen.messages == [("info", "all done")]
        assert screen.query_one("#run-progress").percentage == 1.0
        await pilot.press("o")
        summary = await wait_until(pilot, lambda: isinstance(app.screen, RunSummaryScreen) and app.screen)
        await wait_until(pilot, lambda: summary.summary is not None)
        files = summary.query_one("#files")
        assert {files.get_row_at(i)[0] for i in range(files.row_count)} == {"run.json", "rank0/dump.h5"}
        assert summary.summary.ranks == ["rank0"]


@pilot_test
async def test_stop_key_ends_the_run_cleanly(fake_run, tmp_path):

    async with _running(tmp_path, fake_run, "1000", "0.05", "ok") as (app, pilot, screen):
        await wait_until(pilot, lambda: screen.step >= 1)
        assert screen.check_action("open_result", ()) is None  # not before it ends
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.status in ("stopping", "stopped"))
        await wait_until(pilot, lambda: screen.finished_at is not None)
        assert screen.status == "stopped" and screen.exit_code == 130
        assert screen.summary["steps"] >= 1
        assert screen.check_action("stop", ()) is None and screen.check_action("open_result", ())


@pilot_test
async def test_a_crashing_run_leaves_the_app_running(fake_run, tmp_path):
    from probe_tui.app.screens.run import RunScreen

    async with _running(tmp_path, fake_run, "5", "0.02", "crash") as (app, pilot, screen):
        await wait_until(pilot, lambda: screen.finished_at is not None)
        assert screen.status == "failed" and screen.exit_code == 1
        log = "\n".join(str(line.text) for line in screen.query_one("#run-log").lines)
        assert "RuntimeError: boom in step 1" in log
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, RunScreen))
        assert app.is_running


async def answer_confirm(pilot, key: str, answer: str) -> None:
    """Press ``key``, wait for the confirm dialog it opens, press its ``answer`` button."""
    from probe_tui.app.screens.confirm import ConfirmScreen

    app = pilot.app
    await pilot.press(key)
    await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.is_mounted)
    app.screen.query_one("#answer-" + answer).press()


@pilot_test
async def test_leaving_a_running_run_asks_and_can_leave_it_going(fake_run, tmp_path):
    from probe_tui.app.screens.confirm import ConfirmScreen
    from probe_tui.app.screens.run import RunScreen

    async with _running(tmp_path, fake_run, "1000", "0.05", "ok") as (app, pilot, screen):
        await wait_until(pilot, lambda: screen.step >= 1)
        await answer_confirm(pilot, "escape", "leave")
        await wait_until(pilot, lambda: not isinstance(app.screen, (RunScreen, ConfirmScreen)))
        child = screen.child
        assert child.running
        child.stop(grace_s=5)
        assert child.process.wait(timeout=30) == 130


@pilot_test
async def test_quitting_while_a_run_goes_asks_and_can_stop_it(fake_run, tmp_path):
    async with _running(tmp_path, fake_run, "1000", "0.05", "ok") as (app, pilot, screen):
        await wait_until(pilot, lambda: screen.step >= 1)
        await answer_confirm(pilot, "ctrl+q", "stop")
        await wait_until(pilot, lambda: screen.child.stop_requested_at is not None)
    assert screen.child.process.wait(timeout=30) == 130


@pilot_test
async def test_a_run_that_reported_its_end_does_not_hold_up_quitting(fake_run, tmp_path):
    async with _running(tmp_path, fake_run, "2", "0.01", "ok") as (app, pilot, screen):
        await wait_until(pilot, lambda: screen.ended)
        assert screen.child.reported_end
        assert app.running_children() == []


@pilot_test
async def test_a_run_that_cannot_start_is_reported(tmp_path):
    from probe_tui.app.app import ProbeApp
    from probe_tui.app.screens.run import RunScreen

    config = tmp_path / "stats.json"
    config.write_text('{"task": "statistics"}')
    app = ProbeApp(tmp_path, root_label="~/exp", run_command=[str(tmp_path / "no-such-python")])
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await start(pilot, app, config)
        assert screen.status == "failed" and screen.child is None
        # notify() posts a message: the toast arrives on a later turn of the loop
        await wait_until(pilot, lambda: any("Could not start the run" in str(n.message) for n in app._notifications),
                         what="the notification")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, RunScreen))


@pilot_test
async def test_home_runs_the_selected_config_and_edits_a_runs_config(fake_run, tmp_path):
    from probe_tui.app.screens.builder import BuilderScreen
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.run import RunScreen

    app, config = _app(tmp_path, fake_run, "2", "0.01", "ok")
    config.write_text('{"task": "statistics", "target": "demo"}')
    async with app.run_test(size=(100, 30)) as pilot:
        home = app.screen
        assert isinstance(home, HomeScreen)
        await wait_until(pilot, lambda: home.scanned)
        assert home.query_one("#configs").has_focus  # no runs yet: the configs table has the focus
        await pilot.press("x")
        run = await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen)
        assert run.config_path == config
        await wait_until(pilot, lambda: run.finished_at is not None)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and len(home.runs) == 1)
        await pilot.press("shift+tab")  # to the runs table
        home.query_one("#runs").focus()
        await pilot.press("e")
        builder = await wait_until(pilot, lambda: isinstance(app.screen, BuilderScreen) and app.screen)
        assert builder.path is None and builder.origin == "run 20260101-000000-abcdef"
        assert builder.task == "statistics"


@pilot_test
async def test_an_ended_run_stands_still_and_leaves_no_launch_folder(fake_run, tmp_path):
    """A failed run's bar kept pulsing, its clock ticking, its log said `run folder: None`, and the
    probe-tui-launch-* folder stayed behind after the run and after quitting."""
    from probe_tui.app.screens.run import RunScreen

    async with _running(tmp_path, fake_run, "1", "0.01", "early-fail") as (app, pilot, screen):
        await wait_until(pilot, lambda: screen.finished_at is not None)
        assert screen.status == "failed" and screen.exit_code == 2
        log = "\n".join(str(line.text) for line in screen.query_one("#run-log").lines)
        assert "None" not in log and "run folder: named when the job ends" in log
        bar = screen.query_one("#run-progress")
        assert bar.total is not None  # not the pulsing bar of an unknown total
        assert screen.tick_timer is None
        launch = screen.child.launch_dir
        assert launch.name.startswith("probe-tui-launch-") and launch.is_dir()
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, RunScreen))
        assert not launch.exists()
        second = await start(pilot, app, tmp_path / "stats.json")
        await wait_until(pilot, lambda: second.finished_at is not None)
        launch = second.child.launch_dir
        assert launch.is_dir()
    assert not launch.exists()  # quitting cleans up too

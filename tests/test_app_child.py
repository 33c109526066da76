"""The run screen's child process: launched in its own session, followed through files, stopped cleanly."""

import json
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from probe_tui.app.child import ChildRun, LineTail, child_env, run_command

# A stand-in for `probe-tui --run CONFIG --events -` that writes the same events (used only in tests; the real
# CLI is driven in test_app_flows.py): argv = steps, seconds per step, mode (ok | crash | ignore-sigint).
FAKE_RUN = textwrap.dedent('''
    import json, signal, sys, time
    steps, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    run_dir = "probe_dump/20260101-000000-abcdef"
    def emit(kind, **fields):
        print(json.dumps(dict(kind=kind, **fields)), flush=True)
    if mode == "ignore-sigint":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
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
            events.append(json.loads(line))
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

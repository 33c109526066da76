"""A headless run stops cleanly on SIGINT even when it was started with SIGINT ignored (what a shell does to a
background job): it exits 130, says it stopped, and keeps the steps it completed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_sigint_stops_a_run_started_with_sigint_ignored(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L0",
        "target": {"demo": {"preset": "tiny", "steps": 100000}},
    }))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "probe_tui", "--run", str(config), "--events", "-"],
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, preexec_fn=_ignore_sigint, text=True)
    try:
        events = []
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # read until two steps are done
            events.append(json.loads(line))
            if sum(e["event"] == "step" for e in events) >= 2:
                break
            assert time.monotonic() < deadline, "the run never reached step 2"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130  # a run that ignored SIGINT would still be going
        events += [json.loads(line) for line in proc.stdout]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    end = events[-1]
    assert end["event"] == "run_finished" and end["status"] == "stopped" and end["exit_code"] == 130
    run_json = json.loads((Path(end["run_dir"]) / "run.json").read_text())
    assert run_json["status"] == "stopped"


def _start_demo(tmp_path, name):
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({
        "task": "statistics", "dump_path": str(tmp_path / name), "level": "L1",
        "target": {"demo": {"preset": "tiny", "steps": 100000}},
    }))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "probe_tui", "--run", str(config), "--events", "-"],
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _events_until_step(proc, n):
    events = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        events.append(json.loads(line))
        if sum(e["event"] == "step" for e in events) >= n:
            return events
        assert time.monotonic() < deadline, "the run never reached step %d" % n
    raise AssertionError("the run ended early: %s" % proc.stderr.read()[-2000:])


@pytest.mark.parametrize("signame,code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_stop_signal_exits_128_plus_its_number_and_records_what_was_written(tmp_path, signame, code):
    """SIGTERM once exited 130 and SIGHUP (an SSH drop) was not handled at all, leaving run.json ``running``;
    after a stop the run's summary lacked its steps and records. A step the stop cut short is marked partial."""
    from engines.store import DumpReader

    proc = _start_demo(tmp_path, signame)
    try:
        events = _events_until_step(proc, 3)
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(timeout=120) == code
        events += [json.loads(line) for line in proc.stdout]
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    assert "Traceback" not in stderr
    end = events[-1]
    assert end["event"] == "run_finished" and end["status"] == "stopped" and end["exit_code"] == code
    run_json = json.loads((Path(end["run_dir"]) / "run.json").read_text())
    assert run_json["status"] == "stopped" and run_json["exit_code"] == code
    summary = run_json["summary"]
    assert summary["records"] > 0 and summary["steps_written"] >= 3 and summary["steps"].startswith("0-")
    dump = DumpReader(Path(end["run_dir"]) / "rank0")
    assert dump.status == "stopped"
    steps, partial = dump.steps(), dump.partial_steps()
    per_step = [len(dump.records(step=s)["name"]) for s in steps]
    complete = [n for s, n in zip(steps, per_step) if s not in partial]
    assert len(set(complete[1:])) == 1  # every step after the first (which has more) but a cut one is whole
    if partial:  # the signal came in the middle of a step (almost always): that step says so
        assert list(partial) == [steps[-1]] and partial[steps[-1]] == "stopped"
        assert per_step[-1] < complete[1]
    dump.close()


def test_a_second_writer_for_the_same_rank_folder_exits_2_with_one_line(tmp_path):
    """Two processes of one run writing the same rank folder: the second is refused; it once exited 0."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PROBE_TUI_RUN_ID="launch-7")
    config = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
              "target": {"demo": {"preset": "tiny", "steps": 100000}}}
    first_cfg, second_cfg = tmp_path / "first.json", tmp_path / "second.json"
    first_cfg.write_text(json.dumps(config))
    second_cfg.write_text(json.dumps(dict(config, target={"demo": {"preset": "tiny", "steps": 2}})))
    first = subprocess.Popen([sys.executable, "-m", "probe_tui", "--run", str(first_cfg), "--events", "-"],
                             cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        _events_until_step(first, 1)  # its rank0 store is open
        second = subprocess.run([sys.executable, "-m", "probe_tui", "--run", str(second_cfg)], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=300)
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)
        first.stdout.close()
    assert second.returncode == 2, second.stderr
    said = [line for line in second.stderr.splitlines() if "already holds" in line]
    assert len(said) == 1 and "Traceback" not in second.stderr, second.stderr

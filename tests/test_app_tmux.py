"""Smoke tests of the real program in a terminal: tmux runs `python -m probe_tui`, keys are sent with send-keys
and the screen is read with capture-pane.

1. From an empty folder: build and save a config, run it on the demo, see it finish, open its dump, find it on
   the home screen.
2. The injected-fault path of a new user: the three sample runs, then `probe-tui`: open the compare result from
   home, the first-divergence list starts at the low-precision softmax, jump to the first error, open a dump;
   then run the monitor sample from home and watch the live chart move.
3. The whole walk of a new user: home -> builder (a monitor config) -> run -> monitor -> compare -> quit, and no
   probe-tui-launch-* folder left behind."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tmux_helpers import TmuxSession, have_tmux

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(not have_tmux(), reason="tmux is not installed (apt-get install tmux)"),
]


def test_new_user_builds_runs_and_finds_the_dump(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLORTERM": "", "HOME": str(tmp_path),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with TmuxSession([sys.executable, "-m", "probe_tui"], cwd=tmp_path, width=100, height=30, env=env) as term:
        term.wait_for("No runs under", timeout=60)
        term.send("n")
        term.wait_for("Start a config")
        term.send("Enter")  # the first task: statistics, as `probe-tui init statistics`
        term.wait_for("Config builder")
        term.wait_for("✓ valid")
        term.send("C-s")
        term.wait_for("Save the config as")
        term.send("Enter")  # the proposed name: statistics.json
        term.wait_for("Saved statistics.json")
        term.send("C-r")
        term.wait_for("Run · statistics.json")
        screen = term.wait_for("Finished · o opens the result", timeout=180)
        assert "3 / 3" in screen and "probe_dump/" in screen
        term.send("o")  # the dump browser on what the run wrote
        term.wait_for("Dump · probe_dump/")
        term.wait_for("records ·")
        term.send("i")  # its files
        term.wait_for("Run summary")
        term.wait_for("run.json")
        # Back: summary -> dump -> run -> builder -> home. One key at a time: a terminal reads two quick escapes
        # as one alt+escape.
        term.send("Escape")
        term.wait_for("Dump · probe_dump/")
        term.send("Escape")
        term.wait_for("Finished · o opens the result")
        term.send("Escape")
        term.wait_for("Config builder")
        term.send("Escape")
        screen = term.wait_for("Runs and dumps · 1 row")
        assert "finished" in screen and "statistics.json" in screen
        term.send("C-q")
        term.wait_for("[exited 0]")

    config = json.loads((tmp_path / "statistics.json").read_text())
    assert config["task"] == "statistics"
    runs = [p for p in (tmp_path / "probe_dump").iterdir() if p.name != "latest"]
    assert len(runs) == 1
    meta = json.loads((runs[0] / "run.json").read_text())
    assert meta["status"] == "finished" and meta["exit_code"] == 0


def _env(home: Path):
    return {"PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLORTERM": "", "HOME": str(home),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def _shown_step(screen: str):
    found = re.search(r"step (\d+)  ·  [\d,]+ collected", screen)
    return int(found.group(1)) if found else None


def test_new_user_finds_the_injected_fault_and_watches_the_monitor(tmp_path):
    env = _env(tmp_path)
    for sample in ("statistics.json", "statistics_lowp.json", "compare.json"):  # as sample_configs/README says
        done = subprocess.run([sys.executable, "-m", "probe_tui", "--run", str(ROOT / "sample_configs" / sample)],
                              cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    monitor = json.loads((ROOT / "sample_configs" / "monitor.json").read_text())
    monitor["target"]["demo"].update({"steps": 600, "faults": {"grad_explosion": {"step": 30, "layer": 1,
                                                                                   "scale": 10000.0}}})
    monitor["monitor"]["format"] = ["hdf5"]
    (tmp_path / "monitor_live.json").write_text(json.dumps(monitor, indent=2))
    with TmuxSession([sys.executable, "-m", "probe_tui"], cwd=tmp_path, width=120, height=36, env=env) as term:
        term.wait_for("Runs and dumps · 3 rows", timeout=60)
        term.send("Enter")  # the newest run: the compare result
        term.wait_for("Compare · probe_dump/")
        term.wait_for("rows:")
        term.send("2")  # the first-divergence list
        screen = term.wait_for("target-only ops")
        first = next(line for line in screen.splitlines() if re.match(r"\s*1 r0 s\d", line))
        assert "Demo.naive_softmax.0.forward +2" in first and "target-only ops" in first, screen
        # the region: the softmax cast to bfloat16, computed, cast back
        # the detail pane names the region by its op (beside the table, or below it on a narrow screen)
        pane = term.wait_for("#1 suspect")
        deadline = time.monotonic() + 30
        while not re.search(r"(#1 suspect|▏)\s+Demo\.naive_softmax\.0\.forward \+2", pane):
            assert time.monotonic() < deadline, pane
            time.sleep(0.2)
            pane = term.screen()
        pane = term.wait_for("target-only op(s)")  # the note lists the region's ops (wrapped as the pane's width
        assert "Tensor.to.0.forward," in pane  # and the score's digits fall: the comma marks the note's list)
        term.send("1")
        term.wait_for("filter: all")
        problem = r"\d+ r0 s\d\s+\S+\s+(error|warning)\s"
        assert not re.search(problem, term.screen())  # the first rows pass
        term.send("n")  # the first error of the results table (a warning when the run has no error)
        deadline = time.monotonic() + 30
        while not re.search(problem, term.screen()):  # that row is on screen
            assert time.monotonic() < deadline, term.screen()
            time.sleep(0.2)
        term.send("Escape")
        term.wait_for("Runs and dumps · 3 rows")
        term.send("Down", "Enter")  # the run with the fault: its dump
        term.wait_for("Dump · probe_dump/demo_lowp/")
        term.wait_for("records ·")
        term.send("Escape")
        term.wait_for("Runs and dumps · 3 rows")
        # No pause: tab and x act in order however fast they come (home moves the focus before reading the next
        # key) and whatever the look for runs home starts on its return does (it keeps the focus and the row).
        term.send("Tab")  # to the configs: the monitor config
        term.send("x")
        term.wait_for("Run · monitor_live.json")
        term.wait_for("o opens the live monitor", timeout=120)
        term.send("o")
        screen = term.wait_for("● live", timeout=60)
        deadline = time.monotonic() + 60
        first_step = _shown_step(screen)
        while first_step is None or _shown_step(term.screen()) in (None, first_step):
            assert time.monotonic() < deadline, term.screen()
            first_step = first_step if first_step is not None else _shown_step(term.screen())
            time.sleep(0.2)
        assert _shown_step(term.screen()) > first_step  # the chart moves with the run
        term.wait_for("blocks.1", timeout=60)  # the explosion's alerts
        term.send("Escape")
        term.wait_for("o opens the live monitor")
        term.send("s")
        term.wait_for("Stopped", timeout=60)
        term.send("C-q")
        term.wait_for("[exited 0]")


def test_new_user_walks_home_builder_run_monitor_compare_quit(tmp_path):
    from tests.app_pilot import write_dump

    env = dict(_env(tmp_path), TMPDIR=str(tmp_path / "tmp"))  # where the app makes its launch folders
    (tmp_path / "tmp").mkdir()
    write_dump(tmp_path / "target" / "rank0", golden=False)
    write_dump(tmp_path / "golden" / "rank0", golden=True)
    done = subprocess.run([sys.executable, "-m", "probe_tui", "compare", "target", "golden"], cwd=tmp_path,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with TmuxSession([sys.executable, "-m", "probe_tui"], cwd=tmp_path, width=100, height=30, env=env) as term:
        term.wait_for("Runs and dumps · 1 row", timeout=60)
        time.sleep(1)  # the listing is on screen: let the focus settle on it before the next keys
        term.send("n")
        term.wait_for("Start a config")
        term.send("Down", "Down", "Down", "Down", "Down", "Enter")  # the sixth task: monitor
        term.wait_for("Config builder")
        term.wait_for("✓ valid")
        term.send("C-s")
        term.wait_for("Save the config as")
        term.send("Enter")  # the proposed name: monitor.json
        term.wait_for("Saved monitor.json")
        term.send("C-r")
        term.wait_for("Run · monitor.json")
        term.wait_for("o opens the", timeout=180)  # the live monitor while it runs, the result once finished
        term.send("o")
        term.wait_for("Monitor · probe_dump/")
        term.wait_for("loss/value", timeout=60)  # the default chart: the loss, named in the legend
        term.send("Escape")
        term.wait_for("Run · monitor.json")
        term.wait_for("Finished · o opens the result", timeout=120)
        term.send("Escape")
        term.wait_for("Config builder")
        term.send("Escape")
        term.wait_for("Runs and dumps · 2 rows")
        time.sleep(1)
        term.send("Down", "Enter")  # newest first: the monitor run, then the compare result
        term.wait_for("Compare · probe_dump/")
        term.wait_for("rows:")
        term.send("C-q")
        term.wait_for("[exited 0]")
    assert not list((tmp_path / "tmp").glob("probe-tui-launch-*"))  # the app removed its launch folders

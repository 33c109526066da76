"""Smoke test of the real program in a terminal: tmux runs `python -m probe_tui`, keys are sent with send-keys and
the screen is read with capture-pane. From an empty folder: build and save a config, run it on the demo, see it
finish, open the run, find it on the home screen."""

import json
import os
import sys
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
        term.send("o")
        screen = term.wait_for("Run summary")
        term.wait_for("run.json")
        # Back: summary -> run -> builder -> home. One key at a time: a terminal reads two quick escapes as one
        # alt+escape.
        term.send("Escape")
        term.wait_for("Finished · o opens the result")
        term.send("Escape")
        term.wait_for("Config builder")
        term.send("Escape")
        screen = term.wait_for("Runs and dumps (1)")
        assert "finished" in screen and "statistics.json" in screen
        term.send("C-q")
        term.wait_for("[exited 0]")

    config = json.loads((tmp_path / "statistics.json").read_text())
    assert config["task"] == "statistics"
    runs = [p for p in (tmp_path / "probe_dump").iterdir() if p.name != "latest"]
    assert len(runs) == 1
    meta = json.loads((runs[0] / "run.json").read_text())
    assert meta["status"] == "finished" and meta["exit_code"] == 0

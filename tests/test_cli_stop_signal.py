"""A headless run stops cleanly on SIGINT even when it was started with SIGINT ignored (what a shell does to a
background job): it exits 130, says it stopped, and keeps the steps it completed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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

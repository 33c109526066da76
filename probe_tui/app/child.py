"""A training run as a child process: ``python -m probe_tui --run CONFIG --events -``.

The child writes its events (one JSON object a line) and its log into files of a launch folder, not into pipes,
and runs in its own session: the app crashing or quitting does not kill the run, and a crashing run does not
touch the app. :meth:`ChildRun.follow` tails both files until the child has exited and every line is read.
Nothing here imports Textual; the run screen calls ``follow`` from a thread worker.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import probe_tui

POLL_S = 0.05
STOP_GRACE_S = 10.0
"""Seconds between SIGINT (clean stop: the run is marked stopped, finished steps kept) and SIGTERM."""


def run_command(config: Path, python: str = sys.executable) -> List[str]:
    """The command line that runs ``config`` headless: the same code path as ``probe-tui --run``."""
    return [python, "-m", "probe_tui", "--run", str(config), "--events", "-"]


def child_env(extra: Optional[dict] = None) -> dict:
    """The app's environment, with this ``probe_tui`` importable and unbuffered output."""
    env = dict(os.environ)
    package_root = str(Path(probe_tui.__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([package_root] + paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("TEXTUAL", None)
    env.update(extra or {})
    return env


class LineTail:
    """Reads the complete lines appended to a file since the last call (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._pending = b""

    def read_lines(self) -> List[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in lines]

    def flush(self) -> List[str]:
        """The lines read so far plus a last line with no newline (after the writer has exited)."""
        lines = self.read_lines()
        if self._pending:
            lines.append(self._pending.decode("utf-8", errors="replace"))
            self._pending = b""
        return lines


class ChildRun:
    """One launched run: start it, follow its output, stop it."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: Optional[dict] = None,
                 launch_dir: Optional[Path] = None) -> None:
        self.argv = list(argv)
        self.cwd = Path(cwd)
        self.env = env if env is not None else child_env()
        self.owns_launch_dir = not launch_dir
        """The launch folder is a temporary one made here: :meth:`cleanup` removes it."""
        self.launch_dir = Path(launch_dir) if launch_dir else Path(tempfile.mkdtemp(prefix="probe-tui-launch-"))
        self.events_path = self.launch_dir / "events.jsonl"
        self.log_path = self.launch_dir / "log.txt"
        self.process: Optional[subprocess.Popen] = None
        self.started_at: Optional[float] = None
        self.stop_requested_at: Optional[float] = None
        self.reported_end = False
        """The run has reported how it ended (its ``run_finished`` event): the process is only exiting."""
        self._term_timer: Optional[threading.Timer] = None

    def start(self) -> None:
        from engines import safe_fs

        safe_fs.make_dirs(self.launch_dir)
        with safe_fs.create_file(self.events_path, "wb", replace=True) as events, \
                safe_fs.create_file(self.log_path, "wb", replace=True) as log:
            self.process = subprocess.Popen(self.argv, cwd=str(self.cwd), env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=events, stderr=log, start_new_session=True)
        self.started_at = time.monotonic()

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        return self.process.poll() if self.process else None

    def follow(self, on_lines: Callable[[List[str], List[str]], None],
               cancelled: Callable[[], bool] = lambda: False) -> Optional[int]:
        """Call ``on_lines(event_lines, log_lines)`` with what the child wrote since the last call, until the
        child exits (returns its exit code, negative for a signal) or ``cancelled()`` turns true (returns None;
        the child keeps running)."""
        events, log = LineTail(self.events_path), LineTail(self.log_path)
        while True:
            exited = self.process is None or self.process.poll() is not None
            log_lines = log.flush() if exited else log.read_lines()
            event_lines = [line for line in (events.flush() if exited else events.read_lines()) if line.strip()]
            if log_lines or event_lines:
                on_lines(event_lines, log_lines)
            if exited:
                self._cancel_term_timer()
                return self.returncode
            if cancelled():
                return None
            time.sleep(POLL_S)

    def stop(self, grace_s: float = STOP_GRACE_S) -> bool:
        """Ask the run to stop: SIGINT now (a clean stop), SIGTERM if it is still running after ``grace_s``.
        A second call sends SIGTERM at once. Returns False when there was nothing to stop."""
        if not self.running:
            return False
        if self.stop_requested_at is not None:
            self._signal(signal.SIGTERM)
            return True
        self.stop_requested_at = time.monotonic()
        self._signal(signal.SIGINT)
        self._term_timer = threading.Timer(grace_s, self._terminate_if_running)
        self._term_timer.daemon = True
        self._term_timer.start()
        return True

    def cleanup(self) -> None:
        """Remove the temporary launch folder (its events and log, already shown). A run still going keeps
        writing to the files it holds open; they vanish with it."""
        if self.owns_launch_dir:
            shutil.rmtree(self.launch_dir, ignore_errors=True)

    def _terminate_if_running(self) -> None:
        if self.running:
            self._signal(signal.SIGTERM)

    def _cancel_term_timer(self) -> None:
        if self._term_timer is not None:
            self._term_timer.cancel()
            self._term_timer = None

    def _signal(self, sig: int) -> None:
        try:
            # The child leads its own process group (start_new_session): the whole group gets the signal, so a
            # launcher that spawned workers (torchrun) passes the stop on.
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

"""Drive a real terminal program in a detached tmux session: send keys, read the screen, wait for text."""

import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, Optional, Sequence

POLL_S = 0.2


def have_tmux() -> bool:
    return shutil.which("tmux") is not None


class TmuxSession:
    """One detached session of ``width`` x ``height`` running ``command`` in ``cwd``."""

    def __init__(self, command: Sequence[str], *, cwd: Path, width: int = 100, height: int = 30,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.name = f"probe-tui-test-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        # Keep the pane open after the program exits so that its last screen can still be read.
        shell_cmd = f"env {exports} {' '.join(shlex.quote(c) for c in command)}; echo '[exited '$?']'; sleep 600"
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), "-c", str(cwd),
                   shell_cmd)
        # Keep this size whatever other sessions of the same tmux server do (tests run in parallel).
        try:
            self._tmux("set-option", "-t", self.name, "window-size", "manual")
            self._tmux("resize-window", "-t", self.name, "-x", str(width), "-y", str(height))
        except RuntimeError:  # tmux < 2.9: no manual window size; the -x/-y above usually hold
            pass

    def _tmux(self, *args: str) -> str:
        result = subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30,
                                env={**os.environ, "TMUX": ""})
        if result.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args[:2])}: {result.stderr.strip()}")
        return result.stdout

    def send(self, *keys: str) -> None:
        """tmux key names (``Enter``, ``Tab``, ``C-s``, ``Escape``) or literal text (sent with -l)."""
        for key in keys:
            if key in _TMUX_KEYS or re.fullmatch(r"(C-|M-)\S|F\d{1,2}", key):
                self._tmux("send-keys", "-t", self.name, key)
            else:
                self._tmux("send-keys", "-t", self.name, "-l", key)
            time.sleep(0.05)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        """The screen once it shows ``text``; AssertionError with the last screen after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(POLL_S)
        raise AssertionError(f"{text!r} did not appear within {timeout:.0f} s; the screen was:\n{screen}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, timeout=30)

    def __enter__(self) -> "TmuxSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_TMUX_KEYS = {"Enter", "Tab", "BTab", "Escape", "Up", "Down", "Left", "Right", "BSpace", "Space", "Home", "End",
              "PageUp", "PageDown", "DC"}

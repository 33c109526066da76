"""The run screen: a config running as a child process, with its progress, live log, elapsed time and dump path.

The child is ``python -m probe_tui --run CONFIG --events -`` (:mod:`probe_tui.app.child`); a thread worker tails its
event and log files and posts typed messages; the screen applies them under ``batch_update``.
"""

import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal
from textual.message import Message
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import Label, ProgressBar, RichLog, Static
from textual.worker import get_current_worker

from engines.events import parse_event_line
from probe_tui.app.actions import bindings_for
from probe_tui.app.child import ChildRun, child_env, run_command
from probe_tui.app.screens.base import AppScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.formatting import count_text, format_bytes, format_clock, format_loss

STATUS_STYLES = {
    "starting": "warning",
    "running": "bold info",
    "stopping": "bold warning",
    "finished": "bold success",
    "stopped": "bold warning",
    "disk_full": "bold warning",
    "failed": "bold error",
    "crashed": "bold error",
}


ENDED = ("finished", "stopped", "failed", "disk_full")


def parse_event(line: str) -> Optional[Dict[str, Any]]:
    """One event from a line of the child's stdout as ``{"kind": ..., **fields}``; None for a line that is not
    an event (a training script's own print)."""
    event = parse_event_line(line)
    if event is None:
        return None
    return {"kind": event.kind, **event.fields}


class RunScreen(AppScreen):
    """Runs one saved config and shows how it goes."""

    SCOPE = "run"
    CSS_PATH = "run.tcss"
    BINDINGS = bindings_for("run")

    status: reactive[str] = reactive("starting", init=False, always_update=True, bindings=True)
    """Drives the status badge, the hint line and which keys the footer offers; set once mounted (the run's
    events and the child's exit set it)."""

    class ChildOutput(Message):
        """New lines from the child: parsed events and log lines."""

        def __init__(self, events: List[Dict[str, Any]], log_lines: List[str]) -> None:
            super().__init__()
            self.events = events
            self.log_lines = log_lines

    class ChildExited(Message):
        def __init__(self, returncode: Optional[int]) -> None:
            super().__init__()
            self.returncode = returncode

    def __init__(self, config_path: Path, *, cwd: Path, command: Optional[Sequence[str]] = None,
                 env: Optional[dict] = None, autostart: bool = True) -> None:
        """``autostart=False`` shows the screen without launching (events then come from :meth:`apply_event`)."""
        super().__init__()
        self.autostart = autostart
        self.config_path = Path(config_path)
        self.cwd = Path(cwd)
        self.command = list(command) if command else run_command(self.config_path)
        self.env = env
        self.child: Optional[ChildRun] = None
        self.run_dir: Optional[Path] = None
        self.run_task = ""
        self.step = 0
        """Steps completed so far."""
        self.total_steps: Optional[int] = None
        self.loss: Optional[float] = None
        self.records: Optional[int] = None
        self.bytes: Optional[int] = None
        self.exit_code: Optional[int] = None
        self.summary: Dict[str, Any] = {}
        self.online_failing: Optional[int] = None
        """APIs failing the online check so far (None: the run has no online check)."""
        self.online_apis: List[str] = []
        self.messages: List[Tuple[str, str]] = []
        """``(level, text)`` of the run's message events."""
        self.finished_at: Optional[float] = None
        self.tick_timer: Optional[Timer] = None
        self._leaving = False

    def compose(self) -> ComposeResult:
        with Horizontal(id="run-title-bar"):
            yield Static(Text.assemble(("Run", "bold"), f" · {relative_text(self.config_path, self.cwd)}"),
                         id="run-title")
            yield Label("", id="run-status")
        with Grid(id="run-info"):
            for key in ("task", "step", "dump", "loss", "elapsed", "written"):
                yield Label(key, classes="info-key")
                yield Static("—", id=f"info-{key}", classes="info-value")
        yield ProgressBar(total=None, show_eta=False, id="run-progress")
        yield Static("", id="run-online")
        yield RichLog(id="run-log", wrap=True, markup=False, highlight=False, max_lines=5000)
        yield Static("", id="run-hint")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.status = "starting"
        self.tick_timer = self.set_interval(1.0, self._tick)
        if self.autostart:
            self.start_child()

    # ---- child process ------------------------------------------------------------------------------------
    def start_child(self) -> None:
        try:
            env = self.env if self.env is not None else child_env()
            self.child = ChildRun(self.command, self.cwd, env=env)
            self.child.start()
        except OSError as exc:
            self.child = None
            self.finished_at = time.monotonic()
            self.status = "failed"
            self.notify(f"Could not start the run: {exc}", severity="error", title="Run")
            self._log(f"could not start {' '.join(self.command)}: {exc}", themed("error"))
            self._stop_ticking()
            return
        self.app.track_child(self.child)
        self._log(f"$ {' '.join(self.command)}", "dim")
        self._log(f"  (in {self.cwd}; log file {self.child.log_path})", "dim")
        self._follow()

    @work(thread=True, exclusive=True, group="run-follow", exit_on_error=False)
    def _follow(self) -> None:
        worker = get_current_worker()
        child = self.child

        def deliver(event_lines: List[str], log_lines: List[str]) -> None:
            events: List[Dict[str, Any]] = []
            logs = list(log_lines)
            for line in event_lines:
                event = parse_event(line)
                if event is None:
                    logs.append(line)
                else:
                    events.append(event)
            self.post_message(self.ChildOutput(events, logs))

        returncode = child.follow(deliver, cancelled=lambda: worker.is_cancelled)
        if not worker.is_cancelled:
            self.post_message(self.ChildExited(returncode))

    @on(ChildOutput)
    def _child_output(self, message: "RunScreen.ChildOutput") -> None:
        with self.app.batch_update():
            for line in message.log_lines:
                self._log(line)
            for event in message.events:
                self.apply_event(event)

    def apply_event(self, event: Dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "run_started":
            self.run_dir = Path(str(event["run_dir"])) if event.get("run_dir") else None
            self.run_task = str(event.get("task") or "")
            self.total_steps = event.get("total_steps")
            self.status = "running"
            if self.run_dir is not None:
                self._log(f"run folder: {self.run_dir}", "bold")
            else:  # an analysis job (compare, ...) names its output folder when it ends
                self._log("run folder: named when the job ends", "dim")
        elif kind == "step":
            # ``step`` is the 0-based index of the step that just finished.
            self.step = int(event.get("step", self.step - 1)) + 1
            self.total_steps = event.get("total_steps") or self.total_steps
            self.loss = event.get("loss", self.loss)
            # records and bytes are per step: the screen shows what the run has written so far
            if isinstance(event.get("records"), int):
                self.records = (self.records or 0) + event["records"]
            if isinstance(event.get("bytes"), int):
                self.bytes = (self.bytes or 0) + event["bytes"]
            if isinstance(event.get("online_failing"), int):
                self._online(event["online_failing"], event.get("online_failing_apis"))
            if self.status == "starting":
                self.status = "running"
        elif kind == "message":
            # The child's log (stderr) already prints each message; errors also get a notification here.
            self.messages.append((str(event.get("level", "info")), str(event.get("text", ""))))
            if event.get("level") == "error":
                self.notify(str(event.get("text", "")), severity="error", title="Run")
        elif kind == "run_finished":
            if self.child is not None:
                self.child.reported_end = True
            self.exit_code = event.get("exit_code")
            self.summary = event.get("summary") or {}
            # the run's totals (a writer process may finish its last steps after their step events)
            if isinstance(self.summary.get("records"), int) and self.records is not None:
                self.records = self.summary["records"]
            written = (self.summary.get("capture") or {}).get("bytes")
            if isinstance(written, int) and self.bytes is not None:
                self.bytes = written
            if event.get("run_dir"):
                if self.run_dir is None:
                    self._log(f"run folder: {event['run_dir']}", "bold")
                self.run_dir = Path(str(event["run_dir"]))
            self.status = str(event.get("status") or "finished")
        self._update_info()

    def _online(self, failing: int, apis: Any) -> None:
        """The online check's line: how many APIs fail on the reference so far, and which (as they arrive)."""
        new = [str(a) for a in apis if str(a) not in self.online_apis] if isinstance(apis, list) else []
        self.online_apis += new
        if failing > (self.online_failing or 0):
            self.notify("{} failed the online check".format(", ".join(new) or "an API"), severity="warning",
                        title="Online check")
        self.online_failing = failing
        line = self.query_one("#run-online", Static)
        line.display = True
        if not failing:
            line.update(Text("online check: no API fails on the reference so far", style=themed("success")))
            return
        more = failing - len(self.online_apis)
        names = ", ".join(self.online_apis) + (" and {} more".format(more) if more > 0 else "")
        line.update(Text.assemble(("online check: {} failing API{} ".format(failing, "" if failing == 1 else "s"),
                                   themed("bold error")), names))

    @on(ChildExited)
    def _child_exited(self, message: "RunScreen.ChildExited") -> None:
        self.finished_at = time.monotonic()
        code = message.returncode
        if self.status in ("starting", "running", "stopping"):
            # The child ended without a run_finished event: it crashed, or was killed.
            if code == 0:
                self.status = "finished"
            else:
                self.status = "stopped" if self.child and self.child.stop_requested_at else "failed"
        if self.exit_code is None:
            self.exit_code = code
        self._log(f"process exited with code {code}", "dim")
        self._stop_ticking()
        severity = "information" if self.status == "finished" else "warning"
        result = " · o opens the result" if self.run_dir else ""
        self.notify(f"Run {self.status} (exit {self.exit_code}){result}", severity=severity, title="Run")
        self._update_info()
        self.refresh_bindings()

    def _stop_ticking(self) -> None:
        """An ended run costs nothing: no clock to tick, no progress bar to animate."""
        if self.tick_timer is not None:
            self.tick_timer.stop()
            self.tick_timer = None
        bar = self.query_one("#run-progress", ProgressBar)
        if bar.total is None:  # an unknown number of steps: the bar pulsed; now it stands still
            bar.update(total=max(1, self.step), progress=self.step if self.status == "finished" else 0)
        bar.set_class(self.status != "finished", "-ended-badly")

    def on_unmount(self) -> None:
        if self.child is not None and not self.child.running:
            self.child.cleanup()

    # ---- display ------------------------------------------------------------------------------------------
    def _log(self, line: str, style: str = "") -> None:
        self.query_one("#run-log", RichLog).write(Text(line, style=style))

    def watch_status(self, status: str) -> None:
        label = self.query_one("#run-status", Label)
        label.update(Text(f" {status} ", style=themed(STATUS_STYLES.get(status, "bold"))))
        hint = {
            "starting": "Starting the run…  s stops it",
            "running": ("o opens the live monitor · s stops the run cleanly" if self.run_task == "monitor"
                        else "s stops the run cleanly (finished steps are kept)"),
            "stopping": "Stopping: SIGINT sent, SIGTERM follows after a grace period (s again: now)",
            "finished": "Finished · o opens the result · e edits the config · esc goes back",
            "stopped": "Stopped · o opens what was written · e edits the config · esc goes back",
        }.get(status, "The run failed: the log above says why · e edits the config · esc goes back")
        self.query_one("#run-hint", Static).update(Text(hint, style="italic"))

    def _elapsed(self) -> float:
        if self.child is None or self.child.started_at is None:
            return 0.0
        end = self.finished_at if self.finished_at is not None else time.monotonic()
        return end - self.child.started_at

    def _tick(self) -> None:
        if self.finished_at is None and self.child is not None:
            self.query_one("#info-elapsed", Static).update(format_clock(self._elapsed()))

    def _update_info(self) -> None:
        total = self.total_steps
        self.query_one("#info-task", Static).update(self.run_task or "—")
        self.query_one("#info-step", Static).update(f"{self.step} / {total}" if total else str(self.step))
        dump = relative_text(self.run_dir, self.cwd) if self.run_dir else "—"
        self.query_one("#info-dump", Static).update(Text(dump, style="bold"))
        self.query_one("#info-loss", Static).update(format_loss(self.loss) if isinstance(self.loss, (int, float))
                                                    else "—")
        self.query_one("#info-elapsed", Static).update(format_clock(self._elapsed()))
        written = format_bytes(self.bytes)
        if self.records is not None:
            written = f"{count_text(self.records)} records · {written}"
        self.query_one("#info-written", Static).update(written)
        bar = self.query_one("#run-progress", ProgressBar)
        if total:
            bar.update(total=total, progress=self.step)

    # ---- actions ------------------------------------------------------------------------------------------
    @property
    def ended(self) -> bool:
        """The run has said how it ended (run_finished), or its process has exited."""
        return self.finished_at is not None or self.status in ENDED

    def check_action(self, action: str, parameters: tuple) -> Optional[bool]:
        if action == "stop":
            return True if self.finished_at is None else None
        if action == "open_result":
            live = self.run_task == "monitor" and self.status == "running"  # the live monitor opens at once
            return True if ((self.ended or live) and self.run_dir is not None) else None
        return True

    def action_stop(self) -> None:
        if self.child is None or not self.child.stop():
            return
        if self.status != "stopping":
            self.status = "stopping"
            self._log("stop requested: SIGINT sent", themed("warning"))
        else:
            self._log("SIGTERM sent", themed("warning"))

    def action_open_result(self) -> None:
        if self.run_dir is None:
            self.notify("This run wrote no run folder.", severity="warning")
            return
        path = self.run_dir if self.run_dir.is_absolute() else self.cwd / self.run_dir
        # a monitor run opens its live view, even before the first step is written
        self.app.open_path(path, kind="monitor" if self.run_task == "monitor" else None)

    def action_edit_config(self) -> None:
        self.app.load_into_builder(self.config_path, screen=None)

    def action_back(self) -> None:
        if self.ended or self.child is None:  # a run that reported its end is only exiting: no need to ask
            self.dismiss()
            return

        def answered(choice: str) -> None:
            if choice == "stop":
                self.action_stop()
            elif choice == "leave":
                self.workers.cancel_group(self, "run-follow")
                self.dismiss()

        from probe_tui.app.screens.confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen("The run is still going.",
                                           [("Stop it", "stop"), ("Leave it running", "leave"),
                                            ("Stay", "cancel")]), answered)

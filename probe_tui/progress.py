"""Renders a run's events (``engines.events``) for the headless CLI, on stderr.

On a terminal: a rich progress bar with step, loss, elapsed time and records, with messages as log lines above
it. Anywhere else (CI, nohup, a pipe): plain lines, one per step at most every ``plain_interval_s`` seconds
(plus the first and last), so logs stay readable and small.

In a launch of several processes (torchrun) every line carries its rank (``rank_label``), and only the chosen
ranks draw progress (``progress=False`` elsewhere: warnings, errors and a run that did not finish still show).
"""

import math
import time
from typing import Any, Optional

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from probe_tui.formatting import format_bytes, format_duration, format_loss

LEVEL_STYLES = {"debug": "dim", "info": "", "warning": "yellow", "error": "bold red"}
STATUS_STYLES = {"done": "green", "finished": "green", "stopped": "yellow", "interrupted": "yellow",
                 "disk_full": "yellow"}


def _loss_label(loss: Any) -> str:
    return "" if loss is None else f"loss {format_loss(loss)}"


def _step_label(step: int, total: Optional[int], unit: Optional[str] = None) -> str:
    if unit:  # an analysis's units (compare: rank pairs done, across its workers)
        return f"{step + 1}/{total} {unit}s" if total else f"{step + 1} {unit}s"
    return f"step {step + 1}/{total}" if total else f"step {step + 1}"


def _extras(fields: dict) -> str:
    parts = []
    if fields.get("records") is not None:
        parts.append(f"{fields['records']} records")
    if fields.get("bytes") is not None:
        parts.append(format_bytes(fields["bytes"]))
    if fields.get("online_failing"):  # the online check's failing APIs so far (docs/ACC_CHECK.md)
        parts.append(f"{fields['online_failing']} failing online")
    return "  ".join(parts)


class RichProgressSink:
    """An ``EventSink`` drawing progress on ``console`` (default: a new stderr console)."""

    def __init__(self, console: Optional[Console] = None, *, plain_interval_s: float = 1.0, rank_label: str = "",
                 progress: bool = True) -> None:
        self.console = console or Console(stderr=True)
        self.prefix = f"[{rank_label}] " if rank_label else ""
        self.progress = progress
        self.live = self.console.is_terminal and not self.console.is_dumb_terminal
        self.plain_interval_s = plain_interval_s
        self._progress: Optional[Progress] = None
        self._task: Optional[TaskID] = None
        self._last_plain = -math.inf
        self._pending_plain: Optional[str] = None
        # The header is printed with the first step, message or the end, so that a job refused as bad input
        # (raised before it does anything) prints its one-line error and nothing else.
        self._pending_start: Optional[dict] = None

    # -- EventSink -----------------------------------------------------------------------------------------
    def emit(self, kind: str, **fields: Any) -> None:
        if not self.progress and not _shown_quietly(kind, fields):
            return
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(fields)

    # -- handlers ------------------------------------------------------------------------------------------
    def _on_run_started(self, fields: dict) -> None:
        if self.progress:
            self._pending_start = fields

    def _start(self) -> None:
        fields, self._pending_start = self._pending_start, None
        if fields is None:
            return
        where = f" → {fields['run_dir']}" if fields.get("run_dir") else ""
        self._print(Text.assemble(self.prefix, ("probe-tui ", "bold"), f"{fields.get('task')}{where}"))
        if not self.live:
            return
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[step]}"),
            TextColumn("{task.fields[loss]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[extra]}", style="dim"),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(self.prefix + str(fields.get("task", "run")), total=fields.get("total_steps"),
                                             step="", loss="", extra="")

    def _on_step(self, fields: dict) -> None:
        self._start()
        step, total = int(fields.get("step", 0)), fields.get("total_steps")
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=step + 1, total=total, step=_step_label(step, total, fields.get("unit")),
                                  loss=_loss_label(fields.get("loss")), extra=_extras(fields))
            return
        parts = [self.prefix.strip(), _step_label(step, total, fields.get("unit")), _loss_label(fields.get("loss")),
                 format_duration(fields.get('elapsed_s', 0.0))]
        line = "  ".join(part for part in parts if part)
        extra = _extras(fields)
        line = f"{line}  {extra}" if extra else line
        now = time.monotonic()
        last = total is not None and step + 1 >= total
        if step == 0 or last or now - self._last_plain >= self.plain_interval_s:
            self._print_plain(line)
            self._last_plain = now
            self._pending_plain = None
        else:
            self._pending_plain = line

    def _on_message(self, fields: dict) -> None:
        self._start()
        level = str(fields.get("level", "info"))
        text = str(fields.get("text", ""))
        if self.live:
            self._print(Text(self.prefix + text, style=LEVEL_STYLES.get(level, "")))
        else:
            self._print_plain(self.prefix + (text if level == "info" else f"{level}: {text}"))

    def _on_run_finished(self, fields: dict) -> None:
        self._start()
        if self._pending_plain is not None:  # the last step line of a run that stopped early
            self._print_plain(self._pending_plain)
            self._pending_plain = None
        self.close()
        status, code = fields.get("status"), fields.get("exit_code")
        where = f" → {fields['run_dir']}" if fields.get("run_dir") else ""
        text = Text.assemble(self.prefix, (f"{status}", STATUS_STYLES.get(str(status), "bold red")),
                             f" (exit {code}){where}")
        if self.live:
            self._print(text)
        else:
            self._print_plain(text.plain)

    # -- output --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the live bar (idempotent); call it if a run ends without ``run_finished``."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None

    def _print(self, text: Text) -> None:
        if self.live:
            target = self._progress.console if self._progress is not None else self.console
            target.print(text)
        else:
            self._print_plain(text.plain)

    def _print_plain(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)


def _shown_quietly(kind: str, fields: dict) -> bool:
    """What a rank that draws no progress still prints: warnings, errors, and a run that did not finish."""
    if kind == "message":
        return str(fields.get("level", "info")) in ("warning", "error")
    if kind == "run_finished":
        return str(fields.get("status")) not in ("finished", "disk_full")
    return False

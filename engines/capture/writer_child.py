"""The writer process: ``python -m engines.capture.writer_child``, started by ``engines.capture.writer_process``.

It opens the rank's store, writes each step handed over through its stdin with the same ``DumpSink._write`` as
the training process would, and answers on its stdout with what each step did (records, bytes, failures, notes,
whether the store stopped). Messages, each a ``pipe_frames`` frame:

    in:  ("open", folder, meta, store_mode, compression, compression_level, disk_budget)
         ("step", StepPayload) ... ("close", status)
    out: ("ready", pid) or ("open_failed", type name, message, reason)
         ("done", step, events, stopped, budget_reached) for each step (step None: a message that would not
         load); ("closed", events, highlights, usage) at the end (usage: CPU seconds on steps, steps, peak memory)

When the pipe ends without ``close`` (the training process died) every step received whole is written and the
store closes with status ``killed``. It never imports a framework; it runs in a session of its own, so a Ctrl-C or
a signal to the training's process group leaves it to finish the steps it was given.
"""

import os
import select
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from engines.capture import pipe_frames
from engines.capture.summary import CaptureSummary


class RelayedSummary(CaptureSummary):
    """The writer's ``CaptureSummary``: what the sink reports goes back to the training process's summary (as
    events, sent with each step) instead of being logged here; the highlights stay here until the end."""

    def __init__(self) -> None:
        super().__init__()
        self.events: List[Tuple[Any, ...]] = []

    def failed(self, where: str, exc: BaseException) -> None:
        self.events.append(("failed", where, type(exc).__name__, str(exc)))

    def note(self, text: str, level: int = 30) -> None:
        self.events.append(("note", text, level))

    def step_written(self, step: int, records: int, rows: int, nbytes: int) -> None:
        self.events.append(("written", step, records, rows, nbytes))

    def take_events(self) -> List[Tuple[Any, ...]]:
        events, self.events = self.events, []
        if self.dump_stopped:
            events.append(("dump_stopped", self.dump_stopped))
        return events


def _open(message: Tuple[Any, ...], summary: RelayedSummary) -> Any:
    from engines.capture.sink import DumpSink
    from engines.store import DumpWriter

    _, folder, meta, store_mode, compression, level, disk_budget = message
    writer = DumpWriter(folder, meta=meta, mode=store_mode, compression=compression, compression_level=level,
                        disk_budget=disk_budget)
    return DumpSink(writer, summary)


def _next(fd: int, parent: int, busy: Optional[List[Any]] = None) -> Optional[Any]:
    """The next message, or None when the training process is gone (its pipe ended, or it died while a forked
    child of it, a data-loader worker, still holds the pipe open). ``busy[0]``: CPU seconds reading messages."""
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            started = time.process_time()
            try:
                return pipe_frames.receive(fd)
            except OSError:
                return None
            except Exception as exc:  # a whole frame read that would not load (``pipe_frames``: plain values only)
                return ("unreadable", exc)
            finally:
                if busy is not None:
                    busy[0] += time.process_time() - started
        if os.getppid() != parent:
            return None


def serve(inp: int, out: int, parent: int) -> int:
    summary = RelayedSummary()
    answers = _Answers(out)
    first = _next(inp, parent)
    if first is None or first[0] != "open":
        return 1
    try:
        sink = _open(first, summary)
    except Exception as exc:
        answers.send(("open_failed", type(exc).__name__, str(exc), getattr(exc, "reason", "")))
        return 0
    answers.send(("ready", os.getpid()))
    status = "killed"
    busy = [0.0, 0]  # CPU seconds spent reading and writing steps; steps
    while True:
        message = _next(inp, parent, busy)
        if message is None:
            break
        if message[0] == "close":
            status = message[1]
            break
        if message[0] == "unreadable":
            summary.failed("reading a step", message[1])
            answers.send(("done", None, summary.take_events(), sink.stopped, sink.budget_reached))
            continue
        payload = message[1]
        started = time.process_time()
        try:
            sink._write(payload)
        except Exception as exc:  # reported with the step; the next steps are still tried
            summary.failed("writing step %d" % payload.step, exc)
        busy[0] += time.process_time() - started
        busy[1] += 1
        answers.send(("done", payload.step, summary.take_events(), sink.stopped, sink.budget_reached))
    try:
        sink.close(status)
    except Exception as exc:
        summary.failed("closing the dump store", exc)
    answers.send(("closed", summary.take_events(), summary.highlights, _usage(busy)))
    return 0


def _usage(busy: List[Any]) -> Dict[str, float]:
    """CPU seconds this process spent on steps (reading and writing them), how many, and its peak resident
    memory (MB): for the training process's benchmarks."""
    out = {"step_cpu_s": float(busy[0]), "steps": float(busy[1])}
    try:  # VmHWM: this program's own peak (getrusage's maxrss keeps the forked training process's from before exec)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    out["peak_rss_mb"] = int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return out


class _Answers:
    """The answer pipe; once the training process is gone (a broken pipe) answers are dropped, and the steps
    still in the input pipe are written all the same."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.gone = False

    def send(self, message: Any) -> None:
        if self.gone:
            return
        try:
            pipe_frames.send(self.fd, message)
        except OSError:
            self.gone = True


def main() -> int:
    # stdout is the answer pipe: anything printed (a library's message) goes to stderr instead
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(0, out, os.getppid())


if __name__ == "__main__":
    sys.exit(main())

"""The store's writes in a process of their own (``engines.capture.writer_child``), off the training thread.

A step's end used to write its records on the training thread: building the columns, interning, the HDF5 appends
and the commit, ~1.5 ms a step on issue 21's tiny preset (~4 µs a record) and ~3 ms on the default one. A writer
thread did not help (the store's Python holds the GIL). Here the training process only pickles the step's columns
into a pipe (~0.15-0.3 ms) and a child process writes them with the same ``DumpSink._write``; a reader thread takes
its answers back into the run's summary. At most ``IN_FLIGHT`` steps wait in the pipe, so memory stays bounded.

Used where a step's payload is small: jobs that store no full tensor (the statistics task without
``tensor_list``; a tensor dump's time is the disk's). ``PROBE_TUI_WRITER=inline`` keeps every write in the training
process. Where the child cannot be started or opened, writes stay in the training process (one log line).

What a killed run keeps: the child runs in its own session, so a Ctrl-C or a signal to the training's process group
leaves it alive; when the training process dies it writes every step it received whole and closes the store
(status ``killed``). A killed writer leaves every step it committed readable, as a killed training process did.
"""

import json
import logging
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from engines.capture import pipe_frames
from engines.capture.records import EncodedArgs, encode_all
from engines.capture.summary import CaptureSummary
from engines.store import live

log = logging.getLogger("engines.capture")

ENV_SWITCH = "PROBE_TUI_WRITER"  # "inline": no writer process
IN_FLIGHT = 2  # steps handed over and not yet written, at most
START_TIMEOUT_S = 60  # the child's start and the store's opening (a loaded node, a slow shared file system)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding ``engines`` (for the child's path)


class WriterUnavailable(Exception):
    """The writer process could not be started (the caller writes in this process instead)."""


def wanted(options: Any) -> bool:
    """Whether a job's steps go to a writer process: no full tensor is stored, no writer thread was asked for,
    and the switch is not ``inline``."""
    if os.environ.get(ENV_SWITCH, "").strip().lower() in ("inline", "0", "off", "no"):
        return False
    return not (options.saves_tensors or options.tensor_list or options.async_dump)


def _remote_error(type_name: str, message: str, reason: str = "") -> Exception:
    """An exception standing for one raised in the writer process: the same type name (the summary's key) and
    message, and the store's ``reason`` (``exists``, ``disk_full``) where it had one."""
    exc = type(type_name, (Exception,), {})(message)
    exc.reason = reason
    return exc


class ProcessSink:
    """``DumpSink``'s interface (``write``, ``drain``, ``close``, ``budget_reached``, ``stopped``), writing through a
    child process. ``open`` raises what opening the store raised in the child, or ``WriterUnavailable``."""

    def __init__(self, summary: CaptureSummary, on_step: Optional[Callable[[int, int, int], None]] = None) -> None:
        self.summary = summary
        self.on_step = on_step
        self.budget_reached = False
        self.stopped: Optional[str] = None
        self.pid: Optional[int] = None  # the writer process's
        self.handed: Dict[int, int] = {}  # step -> its records, handed over and not written yet
        self.usage: Dict[str, float] = {}  # the child's CPU seconds and peak memory (MB), told at its end
        self._folder: Optional[Path] = None
        self._proc: Optional[subprocess.Popen] = None
        self._out = -1  # the pipe to the child (its stdin)
        self._in = -1  # its answers (its stdout)
        self._reader: Optional[threading.Thread] = None
        self._lock = threading.Condition()
        self._in_flight = 0
        self._gone: Optional[str] = None  # why the child can take no more steps
        self._closed = False

    # -- start ------------------------------------------------------------------------------------------------
    def open(self, folder: Path, meta: Dict[str, Any], store_mode: str, compression: str,
             compression_level: Optional[int], disk_budget: Optional[int]) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "engines.capture.writer_child"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                          start_new_session=True, close_fds=True)
        except (OSError, ValueError) as exc:
            raise WriterUnavailable("could not start %s: %s" % (sys.executable, exc)) from exc
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._out, self._in = self._proc.stdin.fileno(), self._proc.stdout.fileno()
        pipe_frames.widen(self._out)
        try:
            # the metadata as the store keeps it (JSON): a framework's str subclass (torch's version) as str
            plain_meta = json.loads(json.dumps(meta, default=str))
            pipe_frames.send(self._out, ("open", str(folder), plain_meta, store_mode, compression,
                                         compression_level, disk_budget))
            answered = select.select([self._in], [], [], START_TIMEOUT_S)[0]
            answer = pipe_frames.receive(self._in) if answered else None
        except Exception as exc:  # never break training: the writes stay in this process
            answer = None
            why = "%s: %s" % (type(exc).__name__, exc)
        else:
            why = "it exited before answering" if answered else "no answer in %d s" % START_TIMEOUT_S
        if answer is None or answer[0] not in ("ready", "open_failed"):
            self._reap()
            raise WriterUnavailable("the writer process did not start: %s" % why)
        if answer[0] == "open_failed":
            self._reap()
            raise _remote_error(answer[1], answer[2], answer[3])
        self.pid = int(answer[1])
        self._folder = folder
        live.register(folder, self.drain)  # a reader in this process sees every step handed over
        self._reader = threading.Thread(target=self._read_answers, name="probe-tui-writer-answers", daemon=True)
        self._reader.start()

    # -- the training thread ----------------------------------------------------------------------------------
    def write(self, payload: Any) -> None:
        with self._lock:
            while self._in_flight >= IN_FLIGHT and self._gone is None:
                self._lock.wait()
            if self._gone is not None:
                gone = self._gone
            else:
                gone = None
                self._in_flight += 1
        if gone is not None:
            self.summary.failed("writing step %d" % payload.step, WriterGone(gone))
            return
        self.handed[payload.step] = payload.buffer.num_records
        try:
            body = _step_message(payload)
        except Exception as exc:  # never break training: the step is reported as not written
            with self._lock:
                self._in_flight -= 1
                self.handed.pop(payload.step, None)
                self._lock.notify_all()
            self.summary.failed("writing step %d" % payload.step, exc)
            return
        try:
            pipe_frames.send_body(self._out, body)
        except OSError as exc:
            self._lost("the writer process took no more steps (%s)" % exc)
            self.summary.failed("writing step %d" % payload.step, WriterGone(str(exc)))

    def drain(self) -> None:
        """Wait until every handed-over step is written."""
        with self._lock:
            while self._in_flight and self._gone is None:
                self._lock.wait()

    def close(self, status: str = "finished") -> None:
        if self._closed:
            return
        self._closed = True
        if self._gone is None:
            try:
                pipe_frames.send(self._out, ("close", status))
            except OSError as exc:
                self._lost("the writer process was gone at the end (%s)" % exc)
        if self._reader is not None:
            self._reader.join()
        self._reap()
        if self._folder is not None:
            live.unregister(self._folder)

    # -- the answers ------------------------------------------------------------------------------------------
    def _read_answers(self) -> None:
        while True:
            try:
                message = pipe_frames.receive(self._in)
            except Exception as exc:  # a broken answer: the child is no use any more
                self._lost("a broken answer from the writer process (%s)" % exc)
                return
            if message is None:
                code = self._proc.wait() if self._proc is not None else None
                self._lost("the writer process exited (code %s)" % code)
                return
            if message[0] == "closed":
                self._apply(message[1])
                self.summary.highlights = message[2]
                self.usage = message[3]
                with self._lock:
                    self._gone = "closed"
                    self._lock.notify_all()
                return
            _, step, events, stopped, budget_reached = message
            self.stopped = stopped
            self.budget_reached = budget_reached
            self._apply(events)
            self.handed.pop(step, None)
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def _apply(self, events: Any) -> None:
        s = self.summary
        for event in events:
            kind = event[0]
            if kind == "written":
                _, step, records, rows, nbytes = event
                s.step_written(step, records, rows, nbytes)
                if self.on_step is not None:
                    self.on_step(step, records, nbytes)
            elif kind == "failed":
                s.failed(event[1], _remote_error(event[2], event[3]))
            elif kind == "note":
                s.note(event[1], level=event[2])
            elif kind == "dump_stopped":
                s.dump_stopped = event[1]

    def _lost(self, why: str) -> None:
        with self._lock:
            if self._gone is None:
                self._gone = why
                log.warning("probe-tui: %s; the steps after it are not written, training continues", why)
            self._lock.notify_all()

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        if proc.poll() is None and self.pid is None:  # it never answered
            proc.kill()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # it would not finish: its committed steps stay readable
            proc.kill()
            proc.wait()


def _step_message(payload: Any) -> bytes:
    """The step's message. A record's arguments holding a framework's value (the writer process imports none) are
    encoded to their JSON text here first, as the writer would have."""
    try:
        return pipe_frames.dumps_plain(("step", payload))
    except pipe_frames.NotPlain:
        buffer = payload.buffer
        buffer.rec_args = EncodedArgs(encode_all(buffer.rec_args))
        return pipe_frames.dumps_plain(("step", payload))


class WriterGone(Exception):
    """A step not written: the writer process had exited."""


def start(folder: Path, meta: Dict[str, Any], options: Any, summary: CaptureSummary,
          on_step: Optional[Callable[[int, int, int], None]] = None) -> Optional[ProcessSink]:
    """A running ``ProcessSink`` on ``folder``'s store; None (logged) where no writer process could be started,
    so that the caller writes in this process. Opening errors of the store itself are raised, as in-process."""
    sink = ProcessSink(summary, on_step)
    try:
        sink.open(folder, meta, options.store_mode, options.compression, options.compression_level,
                  options.disk_budget)
    except WriterUnavailable as exc:
        log.info("probe-tui: %s; the steps are written in the training process", exc)
        return None
    return sink

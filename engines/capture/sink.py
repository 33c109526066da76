"""Writing a step: full tensors into the pools, stacks and modules, then records and tensor rows, then commit.

One ``DumpWriter`` per rank (``engines.store``); one batch of appends per step and a ``commit_step`` at its end, so
a killed process leaves every committed step readable. With ``async_dump`` the step is handed to a writer thread
(at most two steps in flight, so memory stays bounded) and training goes on while it is written.
"""

import queue
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from engines.capture.records import EntryColumns, StepBuffer
from engines.capture.summary import CaptureSummary


class StepPayload:
    """Everything the writer needs for one step (the session hands it over and starts a fresh buffer)."""

    __slots__ = ("step", "buffer", "entries", "host_data", "stacks", "modules")

    def __init__(self, step: int, buffer: StepBuffer, entries: EntryColumns,
                 host_data: Dict[int, Tuple[np.ndarray, str]], stacks: List[Tuple[int, List[str]]],
                 modules: List[Tuple[str, str, str]]) -> None:
        self.step = step
        self.buffer = buffer
        self.entries = entries
        self.host_data = host_data
        self.stacks = stacks
        self.modules = modules


class DumpSink:
    """Writes step payloads to a ``DumpWriter`` (synchronously, or from a thread with ``async_write``)."""

    def __init__(self, writer: Any, summary: CaptureSummary, async_write: bool = False,
                 on_step: Optional[Callable[[int, int, int], None]] = None) -> None:
        self.writer = writer
        self.summary = summary
        self.on_step = on_step
        self.stack_ids: Dict[int, int] = {}
        self.budget_reached = False
        self._error: Optional[BaseException] = None
        self._queue: Optional["queue.Queue"] = None
        self._thread: Optional[threading.Thread] = None
        _one_budget_warning()
        if async_write:
            self._queue = queue.Queue(maxsize=2)
            self._thread = threading.Thread(target=self._run, name="probe-tui-writer", daemon=True)
            self._thread.start()

    def write(self, payload: StepPayload) -> None:
        if self._queue is None:
            self._write(payload)
        else:
            self._queue.put(payload)

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            if isinstance(payload, _Marker):
                payload.event.set()
                continue
            try:
                self._write(payload)
            except BaseException as exc:  # reported on close; training is never interrupted
                self._error = exc
                self.summary.failed("writing step %d" % payload.step, exc)

    def _write(self, payload: StepPayload) -> None:
        w = self.writer
        before = w.bytes_written
        entries = payload.entries
        stored = 0
        for e, (arr, dtype_name) in payload.host_data.items():
            if self.budget_reached:
                break
            ref = w.put_tensor(arr, dtype_name)
            if ref is None:
                self.budget_reached = True
                self.summary.note("disk budget reached at step %d: tensor dumping stopped, statistics go on"
                                  % payload.step)
                break
            entries.pool[e] = ref.pool
            entries.offset[e] = ref.offset
            entries.numel[e] = ref.numel
            stored += 1
        for sid, frames in payload.stacks:
            self.stack_ids[sid] = w.intern_stack(list(reversed(frames)))
        if payload.modules:
            w.add_modules([m[0] for m in payload.modules], [m[1] for m in payload.modules],
                          [m[2] for m in payload.modules])
        batch = payload.buffer.build(payload.step, entries, 0, self.stack_ids)
        try:
            self.summary.highlights.add_step(payload.step, batch.records, batch.tensors)
        except Exception as exc:  # the summary is a convenience: never lose a step over it
            self.summary.failed("summarising step %d" % payload.step, exc)
        if batch.num_records:
            rows = np.asarray(w.add_records(**batch.records), dtype=np.int64)
            if batch.num_rows:
                tensors = dict(batch.tensors)
                tensors["record"] = rows[tensors["record"]]
                w.add_tensors(**tensors)
        w.commit_step(payload.step, records=batch.num_records, tensors=batch.num_rows)
        nbytes = w.bytes_written - before
        self.summary.step_written(payload.step, batch.num_records, batch.num_rows, nbytes)
        if self.on_step is not None:
            self.on_step(payload.step, batch.num_records, nbytes)

    def drain(self) -> None:
        """Wait until every handed-over step is written."""
        if self._queue is not None:
            done = threading.Event()
            self._queue.put(_Marker(done))
            done.wait()

    def close(self, status: str = "finished") -> None:
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
            self._queue = None
        self.writer.close(status)


def _one_budget_warning() -> None:
    """The store warns when the budget is reached and so does the summary (naming the step): keep one."""
    import warnings

    from engines.store import StoreWarning

    warnings.filterwarnings("ignore", message=".*disk budget.*", category=StoreWarning)


class _Marker:
    def __init__(self, event: threading.Event) -> None:
        self.event = event


def dump_sink_factory(rank_dir: Callable[[int], Any], options: Any, meta: Dict[str, Any], summary: CaptureSummary,
                      on_step: Optional[Callable[[int, int, int], None]] = None) -> Callable[[int], DumpSink]:
    """``rank -> DumpSink`` writing ``<run>/rank<R>/`` with the job's compression, budget and store mode."""

    def make(rank: int) -> DumpSink:
        from engines.store import DumpWriter

        writer_meta = dict(meta)
        writer_meta["rank"] = rank
        writer = DumpWriter(rank_dir(rank), meta=writer_meta, mode=options.store_mode,
                            compression=options.compression, compression_level=options.compression_level,
                            disk_budget=options.disk_budget)
        return DumpSink(writer, summary, async_write=options.async_dump, on_step=on_step)

    return make

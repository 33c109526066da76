"""Writing a step: full tensors into the pools, stacks and modules, then records and tensor rows, then commit.

One ``DumpWriter`` per rank (``engines.store``); one batch of appends per step and a ``commit_step`` at its end, so
a killed process leaves every committed step readable. With ``async_dump`` the step is handed to a writer thread
(at most two steps in flight, so memory stays bounded) and training goes on while it is written.

Full tensors need not wait for the step's end: when a step's host copies pass ``output.memory_budget`` the
session hands them over early (``spill``) and they go into the pools at once; like any write before a commit
they stay invisible until the step's commit row, so a killed run still shows only completed steps.
"""

import queue
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from engines.capture import writer_process
from engines.capture.records import EntryColumns, StepBuffer
from engines.capture.summary import CaptureSummary


class SpilledTensors:
    """Full tensors of the step in progress already in the pools (``output.memory_budget``): entry -> its
    ``TensorRef``, filled by whoever writes (the writer thread with ``async_dump``) before the step's payload."""

    __slots__ = ("step", "refs", "nbytes")

    def __init__(self, step: int) -> None:
        self.step = step
        self.refs: Dict[int, Any] = {}
        self.nbytes = 0  # store bytes they took (counted into their step's bytes)


class StepPayload:
    """Everything the writer needs for one step (the session hands it over and starts a fresh buffer)."""

    __slots__ = ("step", "buffer", "entries", "host_data", "stacks", "modules", "partial", "spilled")

    def __init__(self, step: int, buffer: StepBuffer, entries: EntryColumns,
                 host_data: Dict[int, Tuple[np.ndarray, str]], stacks: List[Tuple[int, List[str]]],
                 modules: List[Tuple[str, str, str]], partial: Optional[str] = None,
                 spilled: Optional[SpilledTensors] = None) -> None:
        self.partial = partial  # the run ended during this step ("stopped", "failed"): its records are incomplete
        self.spilled = spilled  # the step's tensors written before its end
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
        self.budget_reached = False  # no more tensors: the budget would be passed, or the store stopped
        self.stopped: Optional[str] = None  # the store stopped (disk full, budget): steps are no longer written
        self._step = -1
        store = getattr(writer, "store", None)
        if store is not None:
            store.on_stop = self._on_stop  # one line, from the summary, instead of the store's warning
        self._error: Optional[BaseException] = None
        self._queue: Optional["queue.Queue"] = None
        self._thread: Optional[threading.Thread] = None
        if async_write:
            self._queue = queue.Queue(maxsize=2)
            self._thread = threading.Thread(target=self._run, name="probe-tui-writer", daemon=True)
            self._thread.start()

    def write(self, payload: StepPayload) -> None:
        if self._queue is None:
            self._write(payload)
        else:
            self._queue.put(payload)

    def spill(self, data: Dict[int, Tuple[np.ndarray, str]], into: SpilledTensors) -> None:
        """Write full tensors of the step in progress now (their refs land in ``into``, read at the step's end)."""
        if self._queue is None:
            self._spill(data, into)
        else:
            self._queue.put(_Spill(data, into))

    def _spill(self, data: Dict[int, Tuple[np.ndarray, str]], into: SpilledTensors) -> None:
        w = self.writer
        self._step = into.step
        if self.stopped or self.budget_reached or not self._tensors_fit(into.step, data, {}):
            self.budget_reached = True
            return
        before = w.bytes_written
        for e, (arr, dtype_name) in data.items():
            ref = w.put_tensor(arr, dtype_name)
            if ref is None:  # the store stopped (it said so through _on_stop)
                break
            into.refs[e] = ref
        into.nbytes += w.bytes_written - before

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            if isinstance(payload, _Marker):
                payload.event.set()
                continue
            if isinstance(payload, _Spill):
                try:
                    self._spill(payload.data, payload.into)
                except BaseException as exc:  # reported on close; training is never interrupted
                    self._error = exc
                    self.summary.failed("writing step %d" % payload.into.step, exc)
                continue
            try:
                self._write(payload)
            except BaseException as exc:  # reported on close; training is never interrupted
                self._error = exc
                self.summary.failed("writing step %d" % payload.step, exc)

    def _on_stop(self, reason: str, message: str) -> None:
        self.stopped = self.summary.dump_stopped = reason
        self.budget_reached = True
        self.summary.note("the dump stopped at step %d: %s; training continues" % (self._step, message))

    def _tensors_fit(self, step: int, host_data: Dict[int, Tuple[np.ndarray, str]], rows: Dict[str, int]) -> bool:
        """Under a disk budget, full tensors stop before the step (or the part of a step written early) that
        would pass it, so that statistics go on; the store itself stops the step whose rows do not fit."""
        store = getattr(self.writer, "store", None)
        if store is None or store.disk_budget is None or not host_data:
            return True
        elements: Dict[str, int] = {}
        for arr, _ in host_data.values():
            elements[arr.dtype.name] = elements.get(arr.dtype.name, 0) + int(arr.size)
        if store.fits_budget(rows, elements):
            return True
        self.summary.note("disk budget reached at step %d: tensor dumping stopped, statistics go on" % step)
        return False

    def _write(self, payload: StepPayload) -> None:
        w = self.writer
        self._step = payload.step
        if self.stopped:
            return
        before = w.bytes_written
        entries = payload.entries
        stored = 0
        if payload.spilled is not None:
            for e, ref in payload.spilled.refs.items():
                entries.pool[e] = ref.pool
                entries.offset[e] = ref.offset
                entries.numel[e] = ref.numel
            before -= payload.spilled.nbytes
        counts = {"records": payload.buffer.num_records, "tensors": payload.buffer.num_rows}
        if not self.budget_reached and not self._tensors_fit(payload.step, payload.host_data, counts):
            self.budget_reached = True
        for e, (arr, dtype_name) in payload.host_data.items():
            if self.budget_reached:
                break
            ref = w.put_tensor(arr, dtype_name)
            if ref is None:  # the store stopped (it said so through _on_stop)
                return
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
        info: Dict[str, Any] = {"records": batch.num_records, "tensors": batch.num_rows}
        if payload.partial:
            info["partial"] = payload.partial
        w.commit_step(payload.step, **info)
        if self.stopped:  # the step did not fit: it was not written
            return
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


class _Marker:
    def __init__(self, event: threading.Event) -> None:
        self.event = event


class _Spill:
    def __init__(self, data: Dict[int, Tuple[np.ndarray, str]], into: SpilledTensors) -> None:
        self.data = data
        self.into = into


def dump_sink_factory(rank_dir: Callable[[int], Any], options: Any, meta: Dict[str, Any], summary: CaptureSummary,
                      on_step: Optional[Callable[[int, int, int], None]] = None) -> Callable[[int], Any]:
    """``rank -> sink`` writing ``<run>/rank<R>/`` with the job's compression, budget and store mode: a
    ``writer_process.ProcessSink`` where the job stores no full tensor (``writer_process.wanted``), else a
    ``DumpSink`` in this process."""

    def make(rank: int) -> Any:
        from engines.store import DumpWriter

        writer_meta = dict(meta)
        writer_meta["rank"] = rank
        if writer_process.wanted(options):  # a step's records written off the training thread
            sink = writer_process.start(rank_dir(rank), writer_meta, options, summary, on_step)
            if sink is not None:
                return sink
        writer = DumpWriter(rank_dir(rank), meta=writer_meta, mode=options.store_mode,
                            compression=options.compression, compression_level=options.compression_level,
                            disk_budget=options.disk_budget)
        return DumpSink(writer, summary, async_write=options.async_dump, on_step=on_step)

    return make

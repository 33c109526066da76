"""A MindSpore capture session: the lifecycle (start / stop / step / save / close) around the mechanisms.

- L1: the API wrappers (api_capture), installed while the session runs;
- L0: the ``nn.Cell.__call__`` wrapper and per-parameter gradient hooks (cell_capture);
- backward of both: hooks on the autograd nodes the call created (backward_capture).

Forward capture needs the session *running*; backward hooks and parameter gradients only need the step to be
*open* (from ``start()`` until ``step()``), so ``stop()`` before the gradient call and ``step()`` after it still
capture the backward at every level. Each step's records are handed to a sink at ``step()``; the framework-neutral
parts (names, filters, records, sink, summary) are ``engines.capture``'s, shared with the PyTorch adapter.
"""

import logging
import os
from typing import Any, Callable, List, Optional

import mindspore as ms

from engines.adapters.mindspore import flatten
from engines.adapters.mindspore.api_capture import CURRENT, ApiCapture, wrappers
from engines.adapters.mindspore.backward_capture import PendingBackward
from engines.adapters.mindspore.cell_capture import CellCapture
from engines.adapters.mindspore.entries import TensorEntries
from engines.capture import naming
from engines.capture.filters import CaptureFilter
from engines.capture.options import CaptureOptions
from engines.capture.records import StepBuffer
from engines.capture.sink import StepPayload
from engines.capture.stacks import StackTable
from engines.capture.summary import CaptureSummary

_GRAD_DTYPES = frozenset((ms.float16, ms.bfloat16, ms.float32, ms.float64, ms.complex64, ms.complex128))


def detect_rank() -> int:
    """MindSpore's rank when communication is initialised, else RANK_ID / RANK, else 0."""
    try:
        from mindspore.communication import GlobalComm, get_rank

        if getattr(GlobalComm, "INITED", False):
            return int(get_rank())
    except Exception:
        pass
    for var in ("RANK_ID", "RANK"):
        try:
            return int(os.environ[var])
        except (KeyError, ValueError):
            continue
    return 0


class _Busy:
    __slots__ = ("session",)

    def __init__(self, session: "MindSporeCaptureSession") -> None:
        self.session = session

    def __enter__(self) -> None:
        self.session.busy_depth += 1

    def __exit__(self, *exc: Any) -> None:
        self.session.busy_depth -= 1


class MindSporeCaptureSession:
    """One process's capture. ``sink_factory(rank)`` is called at the first write (the rank is known by then)."""

    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                 force_batched: bool = False) -> None:
        self.options = options
        self.filter = CaptureFilter(options)
        self.summary = summary or CaptureSummary()
        self.sink_factory = sink_factory
        self.sink: Any = None
        self._fixed_rank = rank
        self.rank = rank if rank is not None else detect_rank()
        self.buffer = StepBuffer()
        self.entries = TensorEntries(options, self.summary, force_batched=force_batched)
        self.stacks = StackTable(options.stack_depth)
        self.keep_stacks = options.stack_depth > 0
        self.api_counter = naming.CallCounter()
        self.module_counter = naming.CallCounter()
        self.save_counter = naming.CallCounter()
        self.api_capture = ApiCapture(self)
        self.cells = CellCapture(self)
        self.pending_backward: List[PendingBackward] = []
        self.busy_depth = 0
        self.running = False
        self.armed = False  # zero-code: running begins at the next cell call
        self.step_open = False
        self.step = 0
        self.finished = False
        self.closed = False
        self.arm_cells = False
        self._busy = _Busy(self)
        self._save_handles: List[Any] = []

    # -- lifecycle -------------------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        if self._fixed_rank is None and self.sink is None:
            self.rank = detect_rank()
        return self.filter.rank_selected(self.rank)

    def start(self, model: Any = None) -> None:
        if self.closed or self.finished:
            return
        if model is not None:
            self.cells.add_root(model)
        if not self.enabled:
            self.summary.note("rank %d is not in the config's rank list: nothing is captured on it" % self.rank)
            self._uninstall()
            return
        if self.filter.past_last_step(self.step):
            self._finish_for_good()
            return
        if not self.filter.step_selected(self.step):
            self.summary.step_skipped(self.step)
            self._uninstall()
            return
        self.step_open = True
        self.running = True
        self._install()

    def arm(self) -> None:
        """Zero-code: open the step now, record from the next cell call on."""
        self.start()
        if self.running:
            self.running = False
            self.armed = True

    def stop(self) -> None:
        self.running = False
        self.armed = False
        self._uninstall()

    def step_end(self) -> None:
        """Close the current step: write it, restart counters, advance the step number."""
        if self.closed:
            return
        self.stop()
        self.flush()
        self.step += 1
        self.api_counter.reset()
        self.module_counter.reset()
        self.save_counter.reset()
        self.filter.new_step()
        self.cells.end_step()
        self.step_open = False
        if self.filter.past_last_step(self.step) and not self.finished:
            self._finish_for_good()

    def close(self, status: str = "finished") -> CaptureSummary:
        if self.closed:
            return self.summary
        self.stop()
        self.flush()
        self.closed = True
        self.cells.remove_param_hooks()
        for h in self._save_handles:
            try:
                h.remove()
            except Exception:
                pass
        self._save_handles = []
        self.entries.close()
        if self.sink is not None:
            self.sink.close(status)
        if CURRENT.session is self:
            CURRENT.session = None
        return self.summary

    def _finish_for_good(self, why: Optional[str] = None) -> None:
        self.finished = True
        self.running = False
        self.armed = False
        self._uninstall()
        self.cells.remove_param_hooks()
        if why is None and self.filter.last_step is not None:
            why = "the last selected step (%d) is done" % self.filter.last_step
        if why is not None:
            self.summary.note("%s; capture is off for the rest of the run" % why, level=logging.INFO)

    def _install(self) -> None:
        current = CURRENT.session
        if current is not None and current is not self and not current.closed:
            # The wrappers report to one session; a second one records nothing rather than break training.
            self.summary.note("another MindSpore capture session is active in this process: this one records "
                              "nothing until it is closed")
            self.running = False
            return
        CURRENT.session = self
        opts = self.options
        if opts.module_level or self.arm_cells:
            self.cells.install()
        if opts.api_level:
            w = wrappers()
            w.apply_selector(self.filter.apis)
            w.install()

    def _uninstall(self) -> None:
        if CURRENT.session is not self:
            return  # another session's wrappers: not ours to remove
        self.cells.uninstall()
        wrappers().uninstall()
        CURRENT.session = None  # nothing installed: another session may start

    # -- helpers the capture modules call --------------------------------------------------------------------
    def busy(self) -> _Busy:
        return self._busy

    def module_frame(self):
        return self.cells.current()

    def saves(self, name: str) -> bool:
        if self.entries.saving_stopped:
            return False
        if self.options.saves_tensors:
            return True
        return self.filter.saves_tensor_of(name)

    def add_row(self, record: int, slot: str, t: Any, save: bool = False, fresh: bool = False) -> None:
        entries = self.entries
        entry = entries.entry(t, save, fresh)
        dtype, shape, device = entries.meta[entry]
        self.buffer.add_row(record, slot, dtype, shape, 1 if requires_grad(t) else 0, entry, device, save)

    def buffer_marks(self):
        return self.buffer.num_records, self.buffer.num_rows

    def rollback(self, n_records: int, n_rows: int) -> None:
        self.buffer.truncate(n_records, n_rows)

    def backward_may_be_wanted(self, backward_name: str, listed: bool) -> bool:
        f = self.filter
        if f.scope.finished:
            return False
        return not f.list_patterns or listed or f.listed(backward_name)

    def backward_open(self) -> bool:
        return self.step_open and not self.closed

    def admit_backward(self, pending: PendingBackward) -> bool:
        reason = self.filter.record_reason(pending.name, False)
        if reason is not None:
            self.summary.skipped(reason)
            return False
        return True

    def backward_row(self, pending: PendingBackward, slot: str, grad: Any) -> None:
        dm = self.filter.data_mode
        if not dm.wants(False, slot.startswith("input")):
            return
        save = self.saves(pending.name)
        pending.rows.append((slot, grad, self.entries.entry(grad, save, fresh=True), save))

    def finish_backward(self, pending: PendingBackward) -> None:
        if not pending.admitted:
            return
        record = self.buffer.add_record(pending.name, pending.kind, naming.DIRECTION_BACKWARD, pending.parent,
                                        pending.stack, None, pending.flags)
        rows = sorted(pending.rows, key=lambda r: (0 if r[0].startswith("input") else 1, r[0]))
        meta = self.entries.meta
        for slot, _, entry, save in rows:
            dtype, shape, device = meta[entry]
            self.buffer.add_row(record, slot, dtype, shape, 0, entry, device, save)
        pending.rows = []
        self.record_done(record)

    def record_done(self, record: int) -> None:
        """Extension point: every row of forward or backward ``record`` is in the buffer (parameter-gradient
        records excepted: their rows arrive until the step ends). A no-op here; overflow_check overrides it."""
        return None

    # -- save() ----------------------------------------------------------------------------------------------
    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        """Record ``value`` (a tensor or a nested structure) as ``{name}.{N}.debug``; its gradient, when it is
        part of a gradient computation, as ``{name}_grad.{N}.debug``."""
        if self.closed or not self.enabled or self.finished or not self.filter.step_selected(self.step):
            return
        try:
            with self._busy:
                self.step_open = True
                index = self.save_counter.next(name)
                rec_name = naming.save_record_name(name, index)
                rows: List = []
                skeleton = flatten.walk(value, "value", lambda slot, t: rows.append((slot, t)))
                record = self.buffer.add_record(rec_name, naming.KIND_SAVE, naming.DIRECTION_NONE, "",
                                                self.stacks.current(0) if self.keep_stacks else -1,
                                                {"value": skeleton}, 0)
                save = self.saves(rec_name)
                for slot, t in rows:
                    self.add_row(record, slot, t, save, fresh=True)
                if save_backward:
                    for slot, t in rows:
                        if requires_grad(t) and getattr(t, "_grad_node", None) is not None:
                            self._save_grad_hook(name, index, slot, t)
        except Exception as exc:
            self.summary.failed("save(%s)" % name, exc)

    def _save_grad_hook(self, name: str, index: int, slot: str, t: Any) -> None:
        def hook(grad):
            if not self.backward_open():
                return grad
            try:
                with self._busy:
                    rec = self.buffer.add_record(naming.save_record_name(name, index, grad=True), naming.KIND_SAVE,
                                                 naming.DIRECTION_BACKWARD, "", -1, None, 0)
                    self.add_row(rec, slot, grad, self.saves(name), fresh=True)
            except Exception as exc:
                self.summary.failed("gradient of save(%s)" % name, exc)
            return grad

        self._save_handles.append(t.register_hook(hook))

    # -- writing ---------------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Complete pending backward records and hand the step to the sink."""
        with self._busy:
            for pending in self.pending_backward:
                if not pending.done:
                    try:
                        pending.complete()
                    except Exception as exc:
                        self.summary.failed("finishing %s" % pending.name, exc)
            self.pending_backward = []
            buffer = self.buffer
            if buffer.num_records == 0:
                self.entries.clear()
                return
            try:
                entries = self.entries.finish()
                host_data = self.entries.take_host_data()
            except Exception as exc:
                self.summary.failed("computing step %d statistics" % self.step, exc)
                self.entries.clear()
                self.buffer = StepBuffer()
                return
            self.entries.clear()
            self.buffer = StepBuffer()
            payload = StepPayload(self.step, buffer, entries, host_data, self.stacks.drain_new(),
                                  self.cells.take_new_modules())
            if self.sink is None:
                if self.sink_factory is None:
                    return
                self.rank = self.rank if self._fixed_rank is not None else detect_rank()
                try:
                    self.sink = self.sink_factory(self.rank)
                except Exception as exc:  # e.g. a read-only dump path: report it, never stop training
                    self.summary.failed("opening the dump store", exc)
                    self.sink_factory = None
                    return
            try:
                self.sink.write(payload)
            except Exception as exc:
                self.summary.failed("writing step %d" % self.step, exc)
            if getattr(self.sink, "budget_reached", False):
                self.entries.saving_stopped = True


def requires_grad(t: Any) -> bool:
    """Part of the gradient computation (MindSpore's autograd flag), as ``torch.Tensor.requires_grad`` reads:
    floating tensors only (MindSpore also flags the integer inputs of a differentiated function)."""
    try:
        return bool(t._requires_grad) and t.dtype in _GRAD_DTYPES
    except Exception:
        return False


"""A capture session's lifecycle, framework-neutral: start / stop / step / save / close around an adapter's hooks.

Forward capture needs the session *running*; backward hooks and parameter gradients only need the step to be
*open* (from ``start()`` until ``step_end()``), so ``stop()`` before the backward pass and ``step_end()`` after it
still capture the backward at every level (docs/reference/msprobe-tasks.md §14 C6). Each step's records are handed to a sink at
``step_end()``.

The adapter's session (``TorchCaptureSession``, ``MindSporeCaptureSession``) subclasses ``CaptureSession`` and
brings what touches its framework: ``self.entries`` (its ``TensorEntries``), ``self.modules`` (its module or cell
capture: ``add_root``, ``install``, ``uninstall``, ``end_step``, ``remove_param_hooks``, ``current``,
``take_new_modules``), ``self.api_capture``, ``_install``/``_uninstall`` of its hooks, ``add_row`` (it reads the
tensor's autograd flag on the hot path), ``detect_rank`` and ``_save_grad_hook``. A task that processes calls
otherwise (overflow_check, free_benchmark) plugs its processor in (``plug``: ``engines.capture.processor``).
"""

import logging
from typing import Any, Callable, Dict, List, Optional

from engines.capture import naming
from engines.capture.filters import CaptureFilter
from engines.capture.flatten import Walkers
from engines.capture.options import CaptureOptions
from engines.capture.processor import CallProcessor, hot_path_overrides
from engines.capture.records import StepBuffer
from engines.capture.sink import SpilledTensors, StepPayload
from engines.capture.stacks import StackTable
from engines.capture.summary import CaptureSummary


class Busy:
    """``with session.busy():`` marks the tool's own work, which no hook records."""

    __slots__ = ("session",)

    def __init__(self, session: "CaptureSession") -> None:
        self.session = session

    def __enter__(self) -> None:
        self.session.busy_depth += 1

    def __exit__(self, *exc: Any) -> None:
        self.session.busy_depth -= 1


class CaptureSession:
    """One process's capture. ``sink_factory(rank)`` is called at the first write (the rank is known by then)."""

    # Set by the adapter's subclass.
    walkers: Walkers  # its flatten walkers (for save())
    entries: Any  # its TensorEntries (engines/adapters/<fw>/entries.py)
    modules: Any  # its module (cell) capture: add_root, install, uninstall, end_step, current, take_new_modules
    api_capture: Any  # its API record assembly (engines.capture.api.ApiRecords): call, info_class
    fresh_backward_entries = False  # a gradient tensor is a new entry on every sight (no version counter to trust)
    record_done_hook = False  # a processor defines ``record_done`` (``plug``): the per-call path calls it
    module_dump_class: Any = None  # msprobe's module_dump window (``ModuleDump(session, module, name)``), if any

    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None) -> None:
        self.options = options
        self.filter = CaptureFilter(options)
        self.summary = summary or CaptureSummary()
        self.sink_factory = sink_factory
        self.sink: Any = None
        self._fixed_rank = rank
        self.rank = rank if rank is not None else self.detect_rank()
        self.buffer = StepBuffer()
        self.stacks = StackTable(options.stack_depth)
        self.keep_stacks = options.stack_depth > 0
        self.api_counter = naming.CallCounter()
        self.module_counter = naming.CallCounter()
        self.save_counter = naming.CallCounter()
        self.pending_backward: List[Any] = []
        self.busy_depth = 0
        self.running = False
        self.armed = False  # zero-code: the step is open and recording begins at its first module (cell) call
        self.step_open = False
        self.step = 0
        self.finished = False
        self.closed = False
        self._busy = Busy(self)
        self.partial: Optional[str] = None  # why the step being flushed is incomplete (close() sets it)
        self._save_handles: List[Any] = []
        self.tokens: Any = None  # TokenWindow of start(model, token_range=...)
        self.custom_apis: Any = None  # CustomApis of register_custom_api
        self.dump_window: Any = None  # the module_dump in effect
        self.processor = CallProcessor()  # statistics and tensor: the session's own processing
        self._spilled: Optional[SpilledTensors] = None  # the step's full tensors written early (memory_budget)
        self._may_save: Optional[bool] = None  # any record may save tensors (``saves``; read at first use)

    def plug(self, processor: CallProcessor) -> "CaptureSession":
        """Process each call with ``processor`` (a task's part: ``engines.capture.processor``); returns self."""
        self.processor = processor
        processor.attach(self)
        for name, method in hot_path_overrides(processor):
            setattr(self, name, method)
            if name == "record_done":
                self.record_done_hook = True
        return self

    # -- what the adapter brings -----------------------------------------------------------------------------
    @staticmethod
    def detect_rank() -> int:
        return 0

    def _install(self) -> None:
        raise NotImplementedError

    def _uninstall(self) -> None:
        raise NotImplementedError

    def add_row(self, record: int, slot: str, t: Any, save: bool = False, fresh: bool = False) -> None:
        raise NotImplementedError

    def _save_grad_hook(self, name: str, index: int, slot: str, t: Any) -> None:
        """Record the gradient of a ``save()``d tensor as ``{name}_grad.{index}.debug`` (when it gets one)."""
        raise NotImplementedError

    def _wants_save_grad(self, t: Any) -> bool:
        """Will ``t`` get a gradient that ``save(..., save_backward=True)`` should record?"""
        return False

    def _grad_requires_grad(self, t: Any) -> int:
        """The ``requires_grad`` column of a backward row."""
        return 0

    def _counters(self) -> List[naming.CallCounter]:
        """The call counters that restart every step."""
        return [self.api_counter, self.module_counter, self.save_counter]

    def _add_model(self, model: Any) -> None:
        self.modules.add_root(model)

    # -- lifecycle -------------------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        if self._fixed_rank is None and self.sink is None:
            self.rank = self.detect_rank()
        return self.filter.rank_selected(self.rank)

    def start(self, model: Any = None) -> None:
        if self.closed or self.finished or not self.processor.may_start():
            return
        if model is not None:
            self._add_model(model)
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

    def start_tokens(self, model: Any, first: int, last: int) -> None:
        """``start(model, token_range=[first, last])``: the step opens, recording follows the model's calls
        (``engines.capture.script_controls.TokenWindow``)."""
        if self.tokens is not None and self.tokens.root is not (model[0] if isinstance(model, (list, tuple))
                                                                 and model else model):
            self.tokens.remove()
            self.tokens = None
        self.start(model)
        if self.tokens is None:
            from engines.capture.script_controls import TokenWindow

            self.tokens = TokenWindow(self, model, first, last)
        self.tokens.restart(first, last)

    def set_init_step(self, step: int) -> None:
        """msprobe's ``set_init_step``: the step numbers (and the config's ``step`` list) count from ``step``."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError("set_init_step: expected an integer >= 0, got %r" % (step,))
        if self.step_open or self.buffer.num_records:
            raise ValueError("set_init_step: call it before the first start() (a step is open)")
        self.step = int(step)

    def set_rank(self, rank: int) -> None:
        """``start(rank_id=...)``: this process writes as ``rank`` (before its store opens; later it is kept)."""
        if self.sink is None:
            self._fixed_rank = rank
            self.rank = rank

    def register_custom_api(self, module: Any, api: str, prefix: Optional[str] = None) -> None:
        if self.custom_apis is None:
            from engines.capture.script_controls import CustomApis

            self.custom_apis = CustomApis(self, self.api_capture.info_class)
        self.custom_apis.register(module, api, prefix)

    def restore_custom_api(self, module: Any, api: str) -> None:
        if self.custom_apis is not None:
            self.custom_apis.restore(module, api)

    def module_dump(self, module: Any, name: str) -> None:
        """msprobe's ``module_dump``: until ``module_dump_end()`` only ``module``'s own calls are recorded, named
        ``name`` (the adapter's ``module_dump_class``)."""
        if self.module_dump_class is None:
            raise ValueError("module_dump: not available for this framework")
        if self.dump_window is not None:
            self.module_dump_end()
        self.dump_window = self.module_dump_class(self, module, name)

    def module_dump_end(self) -> None:
        window, self.dump_window = self.dump_window, None
        if window is not None:
            window.end()

    def stop(self) -> None:
        self.running = False
        self.armed = False
        self._uninstall()

    def arm(self) -> None:
        """Zero-code: open the step now (hooks installed), record from its first module (cell) call on
        (``begin_recording``)."""
        self.start()
        if self.running:
            self.armed = True
        self.running = False

    def begin_recording(self) -> None:
        """Zero-code: the step's first module (cell) call: record from here while the step is open."""
        if self.step_open and not self.closed and not self.finished:
            self.running = True

    def resume(self) -> None:
        """Record again (an armed step's next cell call after the session paused itself)."""
        self.running = True

    def step_end(self) -> None:
        """Close the current step: write it, restart counters, advance the step number."""
        if self.closed:
            return
        self.processor.before_step_end()
        self.stop()
        self.flush()
        self.step += 1
        for counter in self._counters():
            counter.reset()
        self.filter.new_step()
        self.modules.end_step()
        self.step_open = False
        if self.filter.past_last_step(self.step) and not self.finished:
            self._finish_for_good()
        self.processor.after_step_end()

    def close(self, status: str = "finished") -> CaptureSummary:
        if self.closed:
            return self.summary
        self.processor.before_close()
        self.stop()
        # A run that ends other than by finishing (a stop signal, the script failing) ends in the middle of a step:
        # what it captured is written, marked partial (docs/FORMAT.md, "Partial steps").
        self.partial = None if status == "finished" else status
        self.flush()
        self.closed = True
        self.modules.remove_param_hooks()
        for h in self._save_handles:
            try:
                h.remove()
            except Exception:
                pass
        self._save_handles = []
        if self.tokens is not None:
            self.tokens.remove()
        if self.custom_apis is not None:
            self.custom_apis.restore_all()
        self.module_dump_end()
        self.entries.close()
        if self.sink is not None:
            self.sink.close(status)
        return self.summary

    def _finish_for_good(self, why: Optional[str] = None) -> None:
        self.finished = True
        self.stop()
        self.modules.remove_param_hooks()
        if why is None and self.filter.last_step is not None:
            why = "the last selected step (%d) is done" % self.filter.last_step
        if why is not None:
            self.summary.note("%s; capture is off for the rest of the run" % why, level=logging.INFO)

    # -- helpers the capture modules call --------------------------------------------------------------------
    def busy(self) -> Busy:
        return self._busy

    def module_frame(self) -> Any:
        return self.modules.current()

    def saves(self, name: str) -> bool:
        may = self._may_save
        if may is None:  # read at first use: False when no record of the session saves tensors
            may = self._may_save = bool(self.options.saves_tensors) or bool(self.filter.tensor_list)
        if not may or self.entries.saving_stopped:
            return False
        if self.options.saves_tensors:
            return True
        return self.filter.saves_tensor_of(name)

    def buffer_marks(self) -> "tuple[int, int]":
        return self.buffer.num_records, self.buffer.num_rows

    def rollback(self, n_records: int, n_rows: int) -> None:
        self.buffer.truncate(n_records, n_rows)

    def backward_may_be_wanted(self, backward_name: str, listed: bool) -> bool:
        f = self.filter
        if f.scope.finished:
            return False
        return not f.list_patterns or listed or f.listed(backward_name)

    def backward_open(self) -> bool:
        return self.step_open and not self.closed and self.processor.backward_open()

    def admit_backward(self, pending: Any) -> bool:
        reason = self.filter.record_reason(pending.name, False)
        if reason is not None:
            self.summary.skipped(reason)
            return False
        return True

    def backward_row(self, pending: Any, slot: str, grad: Any) -> None:
        dm = self.filter.data_mode  # ``dm.wants(False, is_input)`` inline (once a backward row)
        if not dm.backward or not (dm.input if slot.startswith("input") else dm.output):
            return
        save = self.saves(pending.name)
        pending.rows.append((slot, grad, self.entries.entry(grad, save, self.fresh_backward_entries), save))

    def finish_backward(self, pending: Any) -> None:
        if not pending.admitted:
            return
        record = self.buffer.add_record(pending.name, pending.kind, naming.DIRECTION_BACKWARD, pending.parent,
                                        pending.stack, None, pending.flags)
        # inputs first, then outputs, each by slot; equal keys keep their order (the index): a stable sort
        # without a key function call a row
        rows = sorted([(0 if r[0].startswith("input") else 1, r[0], i, r) for i, r in enumerate(pending.rows)])
        meta = self.entries.meta
        for _, _, _, (slot, t, entry, save) in rows:
            dtype, shape, device = meta[entry]
            self.buffer.add_row(record, slot, dtype, shape, self._grad_requires_grad(t), entry, device, save)
        pending.rows = []
        if self.record_done_hook:
            self.record_done(record)

    def record_done(self, record: int) -> None:
        """Every row of forward or backward ``record`` is in the buffer (parameter-gradient records excepted: their
        rows arrive until the step ends). A no-op here; a processor may define it (overflow_check does)."""
        return None

    # -- save() ----------------------------------------------------------------------------------------------
    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        """Record ``value`` (a tensor or a nested structure) as ``{name}.{N}.debug``; its gradient, when it gets
        one, as ``{name}_grad.{N}.debug``."""
        if self.closed or not self.enabled or self.finished or not self.filter.step_selected(self.step):
            return
        try:
            with self._busy:
                self.step_open = True
                index = self.save_counter.next(name)
                rec_name = naming.save_record_name(name, index)
                rows: List = []
                skeleton = self.walkers.walk(value, "value", lambda slot, t: rows.append((slot, t)))
                record = self.buffer.add_record(rec_name, naming.KIND_SAVE, naming.DIRECTION_NONE, "",
                                                self.stacks.current(0) if self.keep_stacks else -1,
                                                {"value": skeleton}, 0)
                save = self.saves(rec_name)
                fresh = self.fresh_backward_entries
                for slot, t in rows:
                    self.add_row(record, slot, t, save, fresh=fresh)
                if save_backward:
                    for slot, t in rows:
                        if self._wants_save_grad(t):
                            self._save_grad_hook(name, index, slot, t)
        except Exception as exc:
            self.summary.failed("save(%s)" % name, exc)

    def record_save_grad(self, name: str, index: int, slot: str, grad: Any) -> None:
        """The body of a ``save()``d tensor's gradient hook (the adapter registers the hook)."""
        if not self.backward_open():
            return
        try:
            with self._busy:
                rec = self.buffer.add_record(naming.save_record_name(name, index, grad=True), naming.KIND_SAVE,
                                             naming.DIRECTION_BACKWARD, "", -1, None, 0)
                self.add_row(rec, slot, grad, self.saves(name), fresh=self.fresh_backward_entries)
        except Exception as exc:
            self.summary.failed("gradient of save(%s)" % name, exc)

    def _store_not_opened(self, exc: Exception) -> None:
        """The store could not be opened at the first step; training goes on without it. A store another process
        already writes (two writers for one rank folder) fails the run at its end with exit code 2."""
        reason = getattr(exc, "reason", "")
        if reason == "exists":  # said once, at the end (engines.capture.engine)
            self.summary.store_refused = str(exc)
        elif reason == "disk_full":
            self.summary.dump_stopped = "disk_full"
            self.summary.note("the dump stopped at step %d: %s; training continues" % (self.step, exc))
        else:
            self.summary.failed("opening the dump store", exc)

    # -- writing ---------------------------------------------------------------------------------------------
    def complete_pending_backward(self) -> None:
        """Complete the backward records whose hooks have not all fired (at step end)."""
        for pending in self.pending_backward:
            if not pending.done:
                try:
                    pending.complete()
                except Exception as exc:
                    self.summary.failed("finishing %s" % pending.name, exc)
        self.pending_backward = []

    def _open_sink(self) -> bool:
        """The rank's sink, created at the first write (the rank is known by then); False when there is none."""
        if self.sink is None:
            if self.sink_factory is None:
                return False
            self.rank = self.rank if self._fixed_rank is not None else self.detect_rank()
            try:
                self.sink = self.sink_factory(self.rank)
            except Exception as exc:  # e.g. a read-only dump path: report it, never stop training
                self._store_not_opened(exc)
                self.sink_factory = None
                return False
        return True

    def spill_tensors(self, data: Dict[int, Any]) -> None:
        """The entries' hook when a step's full-tensor copies pass ``output.memory_budget``: they are written now
        (``DumpSink.spill``) and referenced by the step's rows at its end."""
        spill = getattr(self.sink, "spill", None) if self._open_sink() else None
        if spill is None:
            return
        if self._spilled is None:
            self._spilled = SpilledTensors(self.step)
        spill(data, self._spilled)
        if getattr(self.sink, "budget_reached", False):
            self.entries.saving_stopped = True

    def flush(self) -> None:
        """Complete pending backward records and hand the step to the sink (between the processor's hooks)."""
        self.processor.before_flush()
        self._write_step()
        self.processor.after_flush()

    def _write_step(self) -> None:
        with self._busy:
            self.complete_pending_backward()
            buffer = self.buffer
            if buffer.num_records == 0:
                self.entries.clear()
                self._spilled = None
                return
            try:
                entries = self.entries.finish()
                host_data = self.entries.take_host_data()
            except Exception as exc:
                self.summary.failed("computing step %d statistics" % self.step, exc)
                self.entries.clear()
                self.buffer = StepBuffer()
                self._spilled = None
                return
            self.entries.clear()
            self.buffer = StepBuffer()
            spilled, self._spilled = self._spilled, None
            payload = StepPayload(self.step, buffer, entries, host_data, self.stacks.drain_new(),
                                  self.modules.take_new_modules(), self.partial, spilled)
            if not self._open_sink():
                return
            try:
                self.sink.write(payload)
            except Exception as exc:
                self.summary.failed("writing step %d" % self.step, exc)
            if getattr(self.sink, "budget_reached", False):
                self.entries.saving_stopped = True

"""A PyTorch capture session: the lifecycle (start / stop / step / save / close) around the three mechanisms.

- L1: ``CaptureFunctionMode`` (api_capture), pushed while the session runs;
- L0: global module hooks and per-parameter post-accumulate hooks (module_capture);
- backward of both: hooks on the autograd nodes the call created (backward_capture).

Forward capture needs the session *running*; backward hooks and parameter gradients only need the step to be
*open* (from ``start()`` until ``step()``), so ``stop()`` before ``backward()`` and ``step()`` after it still
captures the backward at every level (reference §14 C6). Each step's records are handed to a sink at ``step()``.
"""

import logging
import os
import sys
from typing import Any, Callable, Dict, List, Optional

import torch

from engines.adapters.torch import flatten
from engines.adapters.torch.api_capture import ApiCapture, CaptureFunctionMode, resolve_info
from engines.adapters.torch.backward_capture import PendingBackward
from engines.adapters.torch.entries import TensorEntries
from engines.adapters.torch.module_capture import ModuleCapture
from engines.capture import naming
from engines.capture.filters import CaptureFilter
from engines.capture.options import CaptureOptions
from engines.capture.records import StepBuffer
from engines.capture.sink import StepPayload
from engines.capture.stacks import StackTable
from engines.capture.summary import CaptureSummary

log = logging.getLogger("engines.capture")

_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")


def detect_rank() -> int:
    """torch.distributed's rank when initialised, else the RANK environment variable, else 0."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


class _Busy:
    __slots__ = ("session",)

    def __init__(self, session: "TorchCaptureSession") -> None:
        self.session = session

    def __enter__(self) -> None:
        self.session.busy_depth += 1

    def __exit__(self, *exc: Any) -> None:
        self.session.busy_depth -= 1


class TorchCaptureSession:
    """One process's capture. ``sink_factory(rank)`` is called at the first write (the rank is known by then)."""

    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                 force_batched: bool = False, force_dispatch: bool = False) -> None:
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
        self.recompute_counter = naming.CallCounter()
        self.save_counter = naming.CallCounter()
        self.api_infos: Dict[Any, Any] = {}
        self.api_capture = ApiCapture(self)
        self.modules = ModuleCapture(self)
        self.pending_backward: List[PendingBackward] = []
        # id(output node) -> (node, edges leaving the module call): lets a parent's graph walk skip its children
        self.walk_memo: Dict[int, Any] = {}
        self.fmode: Optional[CaptureFunctionMode] = None
        self.dmode: Any = None
        self.force_dispatch = force_dispatch
        self.api_depth = 0  # recorded API calls running now (the dispatch fallback records only outside them)
        self.busy_depth = 0
        self.running = False
        self.step_open = False
        self.step = 0
        self.finished = False
        self.closed = False
        self.last_recompute_reentrant = False
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
            if type(model).__name__ == "OptimizedModule":
                from engines.adapters.torch.module_capture import COMPILED_NOTE

                self.summary.note(COMPILED_NOTE)
            self.modules.add_root(model)
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

    def stop(self) -> None:
        self.running = False
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
        self.recompute_counter.reset()
        self.save_counter.reset()
        self.filter.new_step()
        self.modules.end_step()
        self.step_open = False
        if self.filter.past_last_step(self.step) and not self.finished:
            self._finish_for_good()

    def close(self, status: str = "finished") -> CaptureSummary:
        if self.closed:
            return self.summary
        self.stop()
        self.flush()
        self.closed = True
        self.modules.remove_param_hooks()
        for h in self._save_handles:
            h.remove()
        self._save_handles = []
        self.entries.close()
        if self.sink is not None:
            self.sink.close(status)
        return self.summary

    def _finish_for_good(self, why: Optional[str] = None) -> None:
        self.finished = True
        self.running = False
        self._uninstall()
        self.modules.remove_param_hooks()
        if why is None and self.filter.last_step is not None:
            why = "the last selected step (%d) is done" % self.filter.last_step
        if why is not None:
            self.summary.note("%s; capture is off for the rest of the run" % why, level=logging.INFO)

    def _install(self) -> None:
        opts = self.options
        if opts.module_level:
            self.modules.install()
        if opts.api_level and self.fmode is None:
            self.fmode = CaptureFunctionMode(self)
            self.fmode.__enter__()
        if opts.api_level and self.dmode is None:
            from engines.adapters.torch import dispatch_capture

            if dispatch_capture.needed(self.force_dispatch):
                self.dmode = dispatch_capture.CaptureDispatchMode(self)
                self.dmode.__enter__()

    def _uninstall(self) -> None:
        if self.dmode is not None:
            mode, self.dmode = self.dmode, None
            try:
                mode.__exit__(None, None, None)
            except Exception as exc:
                self.summary.failed("removing the dispatch mode", exc)
        if self.fmode is not None:
            mode, self.fmode = self.fmode, None
            try:
                mode.__exit__(None, None, None)
            except Exception as exc:  # someone else's mode on top: leave it, but never crash
                self.summary.failed("removing the function mode", exc)
        self.modules.uninstall()

    # -- helpers the capture modules call --------------------------------------------------------------------
    def busy(self) -> _Busy:
        return self._busy

    def api_info(self, func: Any) -> Any:
        info = resolve_info(func, self.filter.apis)
        try:
            self.api_infos[func] = info
        except TypeError:
            pass
        return info

    def module_frame(self):
        return self.modules.current()

    def saves(self, name: str) -> bool:
        if self.entries.saving_stopped:
            return False
        if self.options.saves_tensors:
            return True
        return self.filter.saves_tensor_of(name)

    def add_row(self, record: int, slot: str, t: torch.Tensor, save: bool = False, fresh: bool = False) -> None:
        entries = self.entries
        entry = entries.entry(t, save, fresh)
        dtype, shape, device = entries.meta[entry]
        self.buffer.add_row(record, slot, dtype, shape, 1 if t.requires_grad else 0, entry, device, save)

    def buffer_marks(self):
        return self.buffer.num_records, self.buffer.num_rows

    def rollback(self, n_records: int, n_rows: int) -> None:
        self.buffer.truncate(n_records, n_rows)

    def recompute_flags(self) -> int:
        """Inside backward: is this a forward re-run by activation checkpointing?"""
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_filename.endswith(_CHECKPOINT_FILE):
                self.last_recompute_reentrant = code.co_name == "backward"
                return naming.FLAG_RECOMPUTED
            frame = frame.f_back
        return 0

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

    def backward_row(self, pending: PendingBackward, slot: str, grad: torch.Tensor) -> None:
        dm = self.filter.data_mode
        if not dm.wants(False, slot.startswith("input")):
            return
        save = self.saves(pending.name)
        pending.rows.append((slot, grad, self.entries.entry(grad, save), save))

    def finish_backward(self, pending: PendingBackward) -> None:
        if not pending.admitted:
            return
        record = self.buffer.add_record(pending.name, pending.kind, naming.DIRECTION_BACKWARD, pending.parent,
                                        pending.stack, None, pending.flags)
        rows = sorted(pending.rows, key=lambda r: (0 if r[0].startswith("input") else 1, r[0]))
        meta = self.entries.meta
        for slot, t, entry, save in rows:
            dtype, shape, device = meta[entry]
            self.buffer.add_row(record, slot, dtype, shape, 1 if t.requires_grad else 0, entry, device, save)
        pending.rows = []
        self.record_done(record)

    def record_done(self, record: int) -> None:
        """Extension point: every row of forward or backward ``record`` is in the buffer (parameter-gradient
        records excepted: their rows arrive until the step ends). A no-op here; overflow_check overrides it."""
        return None

    # -- save() ----------------------------------------------------------------------------------------------
    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        """Record ``value`` (a tensor or a nested structure) as ``{name}.{N}.debug``; its gradient, when it has
        one, as ``{name}_grad.{N}.debug``."""
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
                    self.add_row(record, slot, t, save)
                if save_backward:
                    for slot, t in rows:
                        if t.requires_grad:
                            self._save_grad_hook(name, index, slot, t)
        except Exception as exc:
            self.summary.failed("save(%s)" % name, exc)

    def _save_grad_hook(self, name: str, index: int, slot: str, t: torch.Tensor) -> None:
        def hook(grad: torch.Tensor) -> None:
            if not self.backward_open():
                return None
            try:
                with self._busy:
                    rec = self.buffer.add_record(naming.save_record_name(name, index, grad=True), naming.KIND_SAVE,
                                                 naming.DIRECTION_BACKWARD, "", -1, None, 0)
                    self.add_row(rec, slot, grad, self.saves(name))
            except Exception as exc:
                self.summary.failed("gradient of save(%s)" % name, exc)
            return None

        t.register_hook(hook)

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
            self.walk_memo = {}
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
                                  self.modules.take_new_modules())
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

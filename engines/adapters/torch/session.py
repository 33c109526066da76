"""A PyTorch capture session: the lifecycle (``engines.capture.session``) around the three mechanisms.

- L1: ``CaptureFunctionMode`` (api_capture), pushed while the session runs;
- L0: global module hooks and per-parameter post-accumulate hooks (module_capture);
- backward of both: hooks on the autograd nodes the call created (backward_capture);
- the online check at level aten: its ``TorchDispatchMode`` (``check_mode``), pushed last while the session runs.

What is torch's here: the function and dispatch modes installed while the session runs, the rank from
torch.distributed, the autograd flag of each row, activation-checkpoint re-runs (``recompute_flags``) and the
tensor hook behind ``save()``'s gradient records.
"""

import logging
import os
import sys
from typing import Any, Callable, Dict, List, Optional

import torch

from engines.adapters.torch import flatten
from engines.adapters.torch.api_capture import ApiCapture, CaptureFunctionMode, resolve_info
from engines.adapters.torch.collectives import CollectiveTracker
from engines.adapters.torch.entries import TensorEntries
from engines.adapters.torch.module_capture import ModuleCapture
from engines.adapters.torch.module_dump import ModuleDump
from engines.capture import naming
from engines.capture.options import CaptureOptions
from engines.capture.session import CaptureSession
from engines.capture.summary import CaptureSummary

log = logging.getLogger("engines.capture")

_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
ATEN_COMPILED_NOTE = ("online_check level aten: torch.compile'd code runs eagerly while a dispatch mode is active, "
                      "so the compiled model trains on eager kernels with the check on; use level api to keep "
                      "its compiled kernels")


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


class TorchCaptureSession(CaptureSession):
    """One process's capture. ``sink_factory(rank)`` is called at the first write (the rank is known by then)."""

    detect_rank = staticmethod(detect_rank)
    walkers = flatten.WALKERS
    module_dump_class = ModuleDump

    def note_uninitialised(self, out: Any) -> None:
        """``out`` came from ``torch.empty`` or kin before the step's recording began: overflow_check's entries
        remember it (its NaN is no overflow); other tasks' entries do not ask."""
        note = getattr(self.entries, "note_uninitialised", None)
        if note is None:
            return
        try:
            note(out, out._version)
        except Exception as exc:  # never break training
            self.summary.failed("noting an uninitialised allocation", exc)

    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                 force_batched: bool = False, force_dispatch: bool = False) -> None:
        super().__init__(options, sink_factory, summary=summary, rank=rank)
        self.entries = TensorEntries(options, self.summary, force_batched=force_batched)
        self.entries.spill = self.spill_tensors
        self.recompute_counter = naming.CallCounter()
        self.api_infos: Dict[Any, Any] = {}
        self.api_capture = ApiCapture(self)
        self.collectives = CollectiveTracker()
        self.modules = ModuleCapture(self)
        # id(output node) -> (node, edges leaving the module call): lets a parent's graph walk skip its children
        self.walk_memo: Dict[int, Any] = {}
        self.fmode: Optional[CaptureFunctionMode] = None
        self.dmode: Any = None
        self.force_dispatch = force_dispatch
        self.api_depth = 0  # recorded API calls running now (the dispatch fallback records only outside them)
        # the online check's dispatch mode (level aten: online_check.OnlineDispatch), on top while the session runs
        self.check_mode: Any = None
        self._check_mode_on = False
        self.last_recompute_reentrant = False

    # -- lifecycle -------------------------------------------------------------------------------------------
    def _counters(self) -> List[naming.CallCounter]:
        return [self.api_counter, self.module_counter, self.recompute_counter, self.save_counter]

    def _add_model(self, model: Any) -> None:
        if type(model).__name__ == "OptimizedModule":
            from engines.adapters.torch.module_capture import COMPILED_NOTE

            self.summary.note(COMPILED_NOTE)
            if self.check_mode is not None:
                self.summary.note(ATEN_COMPILED_NOTE)
        self.modules.add_root(model)

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
        if self.check_mode is not None and not self._check_mode_on:
            self.check_mode.__enter__()
            self._check_mode_on = True

    def _uninstall(self) -> None:
        if self._check_mode_on:  # pushed last: popped first
            self._check_mode_on = False
            try:
                self.check_mode.__exit__(None, None, None)
            except Exception as exc:
                self.summary.failed("removing the online check's dispatch mode", exc)
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
    def api_info(self, func: Any) -> Any:
        info = resolve_info(func, self.filter.apis)
        try:
            self.api_infos[func] = info
        except TypeError:
            pass
        return info

    def describe_collective(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any]
                            ) -> Optional[Dict[str, Any]]:
        """The ``collective`` args of a Distributed call (counted whether it is recorded or not, whatever the task's
        processing); None for the other calls of the namespace and when describing it failed (reported, the call
        runs as usual)."""
        self.busy_depth += 1
        try:
            return self.collectives.note(info.api, func, args, kwargs)
        except Exception as exc:  # never break training
            self.summary.failed("describing collective %s" % info.base, exc)
            return None
        finally:
            self.busy_depth -= 1

    def add_row(self, record: int, slot: str, t: torch.Tensor, save: bool = False, fresh: bool = False) -> None:
        """The per-row path: an entry seen before this step (the output of one op is the next one's input, a
        parameter in every call) is found here without a call (``TensorEntries.entry``'s first test, in the same
        order: the tensor itself behind the weak reference, then its version), and the row goes into the
        buffer's columns without ``StepBuffer.add_row``'s frame."""
        entries = self.entries
        cached = None if fresh or save or entries.volatile else entries.cache.get(id(t))
        if cached is not None and cached[0]() is t and cached[1] == t._version:
            entry = cached[2]
        else:
            entry = entries.entry(t, save, fresh)
        dtype, shape, device = entries.meta[entry]
        b = self.buffer
        b.row_record.append(record)
        b.row_slot.append(slot)
        b.row_dtype.append(dtype)
        b.row_shape.append(shape)
        b.row_requires_grad.append(1 if t.requires_grad else 0)
        b.row_entry.append(entry)
        b.row_device.append(device)
        b.row_save.append(save)

    def _grad_requires_grad(self, t: torch.Tensor) -> int:
        return 1 if t.requires_grad else 0

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

    # -- save() ----------------------------------------------------------------------------------------------
    def _wants_save_grad(self, t: torch.Tensor) -> bool:
        return t.requires_grad

    def _save_grad_hook(self, name: str, index: int, slot: str, t: torch.Tensor) -> None:
        def hook(grad: torch.Tensor) -> None:
            self.record_save_grad(name, index, slot, grad)
            return None

        t.register_hook(hook)

    # -- writing ---------------------------------------------------------------------------------------------
    def complete_pending_backward(self) -> None:
        super().complete_pending_backward()
        self.walk_memo = {}

    def flush(self) -> None:
        super().flush()
        self.collectives.rebase()  # the step's collective order served its records' clocks


#: The name every adapter gives its capture session (engines.adapters.protocol).
Session = TorchCaptureSession

"""A MindSpore capture session: the lifecycle (``engines.capture.session``) around the mechanisms.

- L1: the API wrappers (api_capture), installed while the session runs;
- L0: the ``nn.Cell.__call__`` wrapper and per-parameter gradient hooks (cell_capture);
- backward of both: hooks on the autograd nodes the call created (backward_capture).

What is MindSpore's here: the wrappers installed while the session runs (one session at a time reports to
them), the zero-code *armed* state (recording starts at the next cell call), the rank from MindSpore's
communication, the autograd flag of each row and the tensor hook behind ``save()``'s gradient records; the
lifecycle and everything else is ``engines.capture``'s, shared with the PyTorch adapter.
"""

import os
from typing import Any, Callable, Optional

import mindspore as ms

from engines.adapters.mindspore import flatten
from engines.adapters.mindspore.api_capture import CURRENT, ApiCapture, wrappers
from engines.adapters.mindspore.cell_capture import CellCapture
from engines.adapters.mindspore.entries import TensorEntries
from engines.adapters.mindspore.graph_detect import GRAPH_MODE, in_graph_mode
from engines.capture.options import CaptureOptions
from engines.capture.session import CaptureSession
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


class MindSporeCaptureSession(CaptureSession):
    """One process's capture. ``sink_factory(rank)`` is called at the first write (the rank is known by then)."""

    detect_rank = staticmethod(detect_rank)
    walkers = flatten.WALKERS
    fresh_backward_entries = True  # MindSpore's version counter does not move on in-place writes

    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                 force_batched: bool = False) -> None:
        super().__init__(options, sink_factory, summary=summary, rank=rank)
        self.entries = TensorEntries(options, self.summary, force_batched=force_batched)
        self.api_capture = ApiCapture(self)
        self.modules = self.cells = CellCapture(self)
        self.arm_cells = False  # zero-code: the cell wrapper is installed at every level (it begins the step)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def close(self, status: str = "finished") -> CaptureSummary:
        summary = super().close(status)
        if CURRENT.session is self:
            CURRENT.session = None
        return summary

    def _install(self) -> None:
        current = CURRENT.session
        if current is not None and current is not self and not current.closed:
            # The wrappers report to one session; a second one records nothing rather than break training.
            self.summary.note("another MindSpore capture session is active in this process: this one records "
                              "nothing until it is closed")
            self.running = False
            return
        if in_graph_mode():
            # Nothing runs in PyNative: wrappers would record MindSpore's compile-time calls, and parameter hooks
            # would be compiled into the graph.
            self.not_captured("everything this session was to record", GRAPH_MODE)
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
    def not_captured(self, what: str, why: str) -> None:
        self.summary.not_captured_region(what, why)

    def add_row(self, record: int, slot: str, t: Any, save: bool = False, fresh: bool = False) -> None:
        entries = self.entries
        entry = entries.entry(t, save, fresh)
        dtype, shape, device = entries.meta[entry]
        self.buffer.add_row(record, slot, dtype, shape, 1 if requires_grad(t) else 0, entry, device, save)

    # -- save() ----------------------------------------------------------------------------------------------
    def _wants_save_grad(self, t: Any) -> bool:
        return requires_grad(t) and getattr(t, "_grad_node", None) is not None

    def _save_grad_hook(self, name: str, index: int, slot: str, t: Any) -> None:
        def hook(grad: Any) -> Any:
            self.record_save_grad(name, index, slot, grad)
            return grad

        self._save_handles.append(t.register_hook(hook))


def requires_grad(t: Any) -> bool:
    """Part of the gradient computation (MindSpore's autograd flag), as ``torch.Tensor.requires_grad`` reads:
    floating tensors only (MindSpore also flags the integer inputs of a differentiated function)."""
    try:
        return bool(t._requires_grad) and t.dtype in _GRAD_DTYPES
    except Exception:
        return False



#: The name every adapter gives its capture session (engines.adapters.protocol).
Session = MindSporeCaptureSession

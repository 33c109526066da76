"""Zero code change for MindSpore scripts: a whole process captured, steps counted by optimizer calls.

``probe-tui --run`` runs the user's script in-process inside ``ZeroCodeCapture``. MindSpore has no global
optimizer-step hook, so the ``__call__`` of its optimizer base classes (``nn.Optimizer`` and
``mindspore.experimental.optim.Optimizer``, the base of ``mint.optim`` too) is wrapped while the capture is open:
after each call of the first optimizer that steps (a second optimizer in the same loop does not split the
iteration) the step is written and the next one armed. A step begins at the first cell call after that (or after
the script starts), where a user puts ``debugger.start(model)``: model construction and data loading before it
are not recorded, and the outermost cell called becomes the root that names the others.

Limits (docs/MINDSPORE.md): an optimizer that is not a MindSpore ``Cell`` optimizer (a hand-written update loop)
is not seen, so the whole run is one step; ``Model.train`` and ``TrainOneStepCell`` in PyNative work, as they
call the optimizer cell; a loop compiled whole with ``@jit`` (graph mode) has no PyNative ops to record.
"""

import weakref
from typing import Any, Callable, List, Optional, Tuple

from engines.adapters.mindspore.cell_capture import _ORIGINAL_CALL
from engines.adapters.mindspore.session import MindSporeCaptureSession
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary


def optimizer_bases() -> List[type]:
    out: List[type] = []
    try:
        from mindspore.nn.optim.optimizer import Optimizer

        out.append(Optimizer)
    except ImportError:
        pass
    try:
        from mindspore.experimental.optim.optimizer import Optimizer as ExperimentalOptimizer

        out.append(ExperimentalOptimizer)
    except ImportError:
        pass
    return out


class OptimizerCalls:
    """Wraps the optimizer base classes' ``__call__``; ``callback(optimizer)`` runs after each call."""

    def __init__(self, callback: Callable[[Any], None]) -> None:
        self.callback = callback
        self.patched: List[Tuple[type, Any]] = []

    def install(self) -> None:
        if self.patched:
            return
        callback = self.callback

        def __call__(optimizer, *args, **kwargs):
            out = _ORIGINAL_CALL(optimizer, *args, **kwargs)
            callback(optimizer)
            return out

        __call__.__wrapped__ = _ORIGINAL_CALL  # type: ignore[attr-defined]
        for base in optimizer_bases():
            self.patched.append((base, vars(base).get("__call__")))
            base.__call__ = __call__

    def uninstall(self) -> None:
        for base, original in self.patched:
            if original is None:
                if "__call__" in vars(base):
                    delattr(base, "__call__")
            else:
                base.__call__ = original
        self.patched = []


class ZeroCodeCapture:
    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]],
                 summary: Optional[CaptureSummary] = None,
                 on_step_end: Optional[Callable[[int, int], None]] = None) -> None:
        self.session = MindSporeCaptureSession(options, sink_factory, summary=summary)
        self.session.arm_cells = True
        self.on_step_end = on_step_end
        self._primary: Optional[weakref.ref] = None
        self._optimizers = OptimizerCalls(self._after_optimizer_call)
        self.steps_seen = 0

    @property
    def summary(self) -> CaptureSummary:
        return self.session.summary

    def __enter__(self) -> "ZeroCodeCapture":
        self._optimizers.install()
        self.session.arm()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._optimizers.uninstall()
        status = "finished" if exc_type is None else ("stopped" if exc_type is KeyboardInterrupt else "failed")
        self.session.close(status)
        return None

    def close(self, status: str = "finished") -> CaptureSummary:
        self._optimizers.uninstall()
        return self.session.close(status)

    def _after_optimizer_call(self, optimizer: Any) -> None:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            return
        s = self.session
        step = s.step
        records = s.buffer.num_records
        try:
            s.step_end()
            s.arm()
        except Exception as exc:  # never break training
            s.summary.failed("closing step %d" % step, exc)
        self.steps_seen += 1
        if self.on_step_end is not None:
            self.on_step_end(step, records)

"""Zero code change for MindSpore scripts: a whole process captured, steps counted by optimizer calls.

``probe-tui --run`` runs the user's script in-process inside ``ZeroCodeCapture``. MindSpore has no global
optimizer-step hook; ``optimizer_hooks`` wraps the ``__call__`` of its optimizer base classes while the capture is
open: after each call of the first optimizer that steps (a second optimizer in the same loop does not split the
iteration) the step is written and the next one armed. A step begins at the first cell call after that (or after
the script starts), where a user puts ``debugger.start(model)``: model construction and data loading before it
are not recorded, and the outermost cell called becomes the root that names the others.

Limits (docs/MINDSPORE.md): an optimizer that is not a MindSpore ``Cell`` optimizer (a hand-written update loop)
is not seen, so the whole run is one step; ``Model.train`` and ``TrainOneStepCell`` in PyNative work, as they
call the optimizer cell; a loop compiled whole with ``@jit`` (graph mode) has no PyNative ops to record.
"""

import weakref
from typing import Any, Callable, Optional

from engines.adapters.mindspore.optimizer_hooks import register_optimizer_post_hook
from engines.adapters.mindspore.session import MindSporeCaptureSession
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary


class ZeroCodeCapture:
    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]],
                 summary: Optional[CaptureSummary] = None,
                 on_step_end: Optional[Callable[[int, int], None]] = None,
                 session: Optional[MindSporeCaptureSession] = None) -> None:
        # ``session``: a session built by the caller (overflow_check and free_benchmark bring their own).
        self.session = session or MindSporeCaptureSession(options, sink_factory, summary=summary)
        self.session.arm_cells = True
        self.on_step_end = on_step_end
        self._primary: Optional[weakref.ref] = None
        self._handle = None
        self.steps_seen = 0

    @property
    def summary(self) -> CaptureSummary:
        return self.session.summary

    def __enter__(self) -> "ZeroCodeCapture":
        self._handle = register_optimizer_post_hook(self._after_optimizer_call)
        self.session.arm()
        return self

    def _remove_hook(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def __exit__(self, exc_type, exc, tb) -> None:
        self._remove_hook()
        status = "finished" if exc_type is None else ("stopped" if exc_type is KeyboardInterrupt else "failed")
        self.session.close(status)
        return None

    def close(self, status: str = "finished") -> CaptureSummary:
        self._remove_hook()
        return self.session.close(status)

    def _after_optimizer_call(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
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

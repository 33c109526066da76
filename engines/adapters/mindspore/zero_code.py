"""Zero code change for MindSpore scripts (``engines.capture.zero_code``): steps are optimizer calls.

MindSpore has no global optimizer-step hook; ``optimizer_hooks`` wraps the ``__call__`` of its optimizer base
classes while the capture is open, and after each call of the first optimizer that steps the step is written and
the next one armed (the session's ``arm``: recording starts at the next cell call, and the outermost cell called
becomes the root that names the others).

Limits (docs/MINDSPORE.md): an optimizer that is not a MindSpore ``Cell`` optimizer (a hand-written update loop)
is not seen, so the whole run is one step; ``Model.train`` and ``TrainOneStepCell`` in PyNative work, as they
call the optimizer cell; a loop compiled whole with ``@jit`` (graph mode) has no PyNative ops to record.
"""

from typing import Any, Callable, Optional

from engines.adapters.mindspore.optimizer_hooks import HookHandle, register_optimizer_post_hook
from engines.adapters.mindspore.session import MindSporeCaptureSession
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.capture.zero_code import ZeroCode


class ZeroCodeCapture(ZeroCode):
    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]],
                 summary: Optional[CaptureSummary] = None,
                 on_step_end: Optional[Callable[[int, int], None]] = None,
                 session: Optional[MindSporeCaptureSession] = None) -> None:
        # ``session``: a session built by the caller (overflow_check and free_benchmark bring their own).
        super().__init__(session or MindSporeCaptureSession(options, sink_factory, summary=summary), on_step_end)
        self.session.arm_cells = True
        self._handle: Optional[HookHandle] = None

    def _install_step_hook(self) -> None:
        self._handle = register_optimizer_post_hook(self._after_optimizer_call)

    def _arm(self) -> None:
        self.session.arm()

    def _remove_hooks(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _after_optimizer_call(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        self.optimizer_stepped(optimizer)

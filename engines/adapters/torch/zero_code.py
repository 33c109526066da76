"""Zero code change: a whole process captured, steps counted by optimizer steps.

``probe-tui --run`` runs the user's script in-process inside ``ZeroCodeCapture``. A step begins at the first
``nn.Module`` call after the previous optimizer step (or after the script starts), the point where a user puts
``debugger.start(model)``: model construction and data loading before it are not recorded, so a script run this
way writes the same records as the in-script API around its forward. torch's global optimizer-step hook closes
the step after each ``optimizer.step()`` of the first optimizer that steps (a second optimizer in the same loop
does not split the iteration), and the step filter switches every mechanism off between selected steps.
"""

import weakref
from typing import Any, Callable, Optional

import torch

from engines.adapters.torch.session import TorchCaptureSession
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary


class ZeroCodeCapture:
    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]],
                 summary: Optional[CaptureSummary] = None,
                 on_step_end: Optional[Callable[[int, int], None]] = None,
                 session: Optional[TorchCaptureSession] = None) -> None:
        # ``session``: a session built by the caller (overflow_check and free_benchmark bring their own).
        self.session = session or TorchCaptureSession(options, sink_factory, summary=summary)
        self.on_step_end = on_step_end
        self._primary: Optional[weakref.ref] = None
        self._handle = None
        self._arm_handle = None
        self.steps_seen = 0

    @property
    def summary(self) -> CaptureSummary:
        return self.session.summary

    def __enter__(self) -> "ZeroCodeCapture":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._after_optimizer_step)
        self._begin_step()
        return self

    def _begin_step(self) -> None:
        """Arm: install everything, but record only from the next module call on."""
        from torch.nn.modules.module import register_module_forward_pre_hook

        if self._arm_handle is None:
            # Registered before the session's own module hooks, so it runs first on that call.
            self._arm_handle = register_module_forward_pre_hook(self._on_module_call)
        self.session.start()
        self.session.running = False

    def _on_module_call(self, module: Any, args: Any) -> None:
        if type(module).__name__ == "OptimizedModule":
            from engines.adapters.torch.module_capture import COMPILED_NOTE

            self.session.summary.note(COMPILED_NOTE)
        if self._arm_handle is not None:
            self._arm_handle.remove()
            self._arm_handle = None
        s = self.session
        if s.step_open and not s.closed and not s.finished:
            s.running = True
        return None

    def _remove_hooks(self) -> None:
        if self._arm_handle is not None:
            self._arm_handle.remove()
            self._arm_handle = None
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def __exit__(self, exc_type, exc, tb) -> None:
        self._remove_hooks()
        status = "finished" if exc_type is None else ("stopped" if exc_type is KeyboardInterrupt else "failed")
        self.session.close(status)
        return None

    def close(self, status: str = "finished") -> CaptureSummary:
        self._remove_hooks()
        return self.session.close(status)

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
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
            self._begin_step()
        except Exception as exc:  # never break training
            s.summary.failed("closing step %d" % step, exc)
        self.steps_seen += 1
        if self.on_step_end is not None:
            self.on_step_end(step, records)

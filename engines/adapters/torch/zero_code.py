"""Zero code change: a whole process captured, steps counted by optimizer steps.

``probe-tui --run`` runs the user's script in-process inside ``ZeroCodeCapture``: the session starts before the
script's first line, torch's global optimizer-step hook closes a step after each ``optimizer.step()`` of the first
optimizer that steps (a second optimizer in the same loop does not split the iteration), and the step filter
switches every mechanism off between selected steps.
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
                 on_step_end: Optional[Callable[[int, int], None]] = None) -> None:
        self.session = TorchCaptureSession(options, sink_factory, summary=summary)
        self.on_step_end = on_step_end
        self._primary: Optional[weakref.ref] = None
        self._handle = None
        self.steps_seen = 0

    @property
    def summary(self) -> CaptureSummary:
        return self.session.summary

    def __enter__(self) -> "ZeroCodeCapture":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._after_optimizer_step)
        self.session.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        status = "finished" if exc_type is None else ("stopped" if exc_type is KeyboardInterrupt else "failed")
        self.session.close(status)
        return None

    def close(self, status: str = "finished") -> CaptureSummary:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
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
            s.start()
        except Exception as exc:  # never break training
            s.summary.failed("closing step %d" % step, exc)
        self.steps_seen += 1
        if self.on_step_end is not None:
            self.on_step_end(step, records)

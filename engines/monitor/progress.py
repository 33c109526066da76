"""``step`` events for collection engines whose steps are seen by an optimizer hook.

The demo reports each step (with its loss) through ``on_step``; scripts and callables report nothing, so their
steps are announced by the hook. One reporter serves both without announcing a step twice.
"""

import time
from typing import Callable, Optional

from engines.events import EventSink


class StepReporter:
    def __init__(self, events: EventSink, total_steps: Optional[int], *, target_reports_steps: bool,
                 extra: Optional[Callable[[], dict]] = None) -> None:
        self._events = events
        self._total = total_steps
        self._from_target = target_reports_steps
        self._extra = extra
        self._started = time.monotonic()
        self.steps = 0
        self.last_loss: Optional[float] = None

    def _emit(self, step: int, loss: Optional[float]) -> None:
        fields = {"step": step, "total_steps": self._total, "loss": loss,
                  "elapsed_s": round(time.monotonic() - self._started, 3)}
        if self._extra is not None:
            try:
                fields.update(self._extra())
            except Exception:  # progress must never break a run
                pass
        self._events.emit("step", **fields)
        self.steps += 1

    def from_hook(self, step: int) -> None:
        if not self._from_target:
            self._emit(step, None)

    def from_target(self, step: int, loss: Optional[float] = None) -> None:
        self.last_loss = None if loss is None else float(loss)
        if self._from_target:
            self._emit(step, self.last_loss)

"""The one path of ``step`` events: every task reports the steps it closes to a ``StepReporter``.

Two sources can tell a step ended: the target (the demo calls ``on_step(step, loss)`` after each of its steps) and
the task's own hook (an optimizer step under ``--run``, ``debugger.step()`` in a script). The demo reports its steps
itself, with the loss, so the hook's reports are then left out: no step is announced twice. ``details(step)`` adds
what the task wrote for the step (``records``, ``bytes``) to the event.
"""

import time
from typing import Any, Callable, Dict, Optional

from engines.events import EventSink, NullSink


class StepReporter:
    def __init__(self, events: Optional[EventSink] = None, total_steps: Optional[int] = None, *,
                 target_reports_steps: bool = False) -> None:
        self._events = events if events is not None else NullSink()
        self._total = total_steps
        self._from_target = target_reports_steps
        self._started = time.monotonic()
        #: ``details(step) -> {"records": .., "bytes": ..}``: set by the task that knows them
        self.details: Callable[[int], Dict[str, Any]] = lambda step: {}
        self.steps = 0
        self.losses: Dict[int, Any] = {}

    def from_hook(self, step: int, *_: Any) -> None:
        """The task's hook closed ``step`` (announced unless the target reports its steps itself)."""
        if not self._from_target:
            self._emit(step, None)

    def from_target(self, step: int, loss: Optional[float] = None) -> None:
        """The target finished ``step`` (the demo's ``on_step``)."""
        if self._from_target:
            self._emit(step, None if loss is None else float(loss))

    def sorted_losses(self) -> list:
        return [self.losses[s] for s in sorted(self.losses)]

    def _emit(self, step: int, loss: Optional[float]) -> None:
        self.losses[step] = loss
        fields: Dict[str, Any] = {"step": step, "total_steps": self._total, "loss": loss,
                                  "elapsed_s": round(time.monotonic() - self._started, 3)}
        try:
            fields.update(self.details(step))
        except Exception:  # progress must never break a run
            pass
        self._events.emit("step", **fields)
        self.steps += 1

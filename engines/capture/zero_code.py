"""Zero code change, framework-neutral: a whole process captured, steps counted by optimizer steps.

``probe-tui --run`` runs the user's script in-process inside the adapter's ``ZeroCodeCapture``. A step begins at
the first module (cell) call after the previous optimizer step (or after the script starts), the point where a
user puts ``debugger.start(model)``: model construction and data loading before it are not recorded, so a script
run this way writes the same records as the in-script API around its forward. The step closes after each step
of the first optimizer that steps (a second optimizer in the same loop does not split the iteration), and the
step filter switches every mechanism off between selected steps.

The adapter's subclass brings the framework's hooks: ``_install_step_hook`` (calls ``optimizer_stepped(optimizer)``
after each optimizer step), ``_arm`` (open the step, record from the next module call on) and ``_remove_hooks``.
"""

import weakref
from typing import Any, Callable, Optional

from engines.capture.summary import CaptureSummary

NO_OPTIMIZER_STEP = ("no optimizer step was seen: steps are counted by optimizer steps, so the whole run was "
                     "recorded as step %d")


class ZeroCode:
    def __init__(self, session: Any, on_step_end: Optional[Callable[[int, int], None]] = None) -> None:
        self.session = session
        self.on_step_end = on_step_end
        self._primary: Optional[weakref.ref] = None
        self.steps_seen = 0

    # -- what the adapter brings -----------------------------------------------------------------------------
    def _install_step_hook(self) -> None:
        raise NotImplementedError

    def _arm(self) -> None:
        raise NotImplementedError

    def _remove_hooks(self) -> None:
        raise NotImplementedError

    # -- the capture -----------------------------------------------------------------------------------------
    @property
    def summary(self) -> CaptureSummary:
        return self.session.summary

    def __enter__(self) -> "ZeroCode":
        self._install_step_hook()
        self._arm()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._remove_hooks()
        status = "finished" if exc_type is None else \
            ("stopped" if issubclass(exc_type, KeyboardInterrupt) else "failed")
        self._note_step_counting()
        self.session.close(status)
        return None

    def close(self, status: str = "finished") -> CaptureSummary:
        self._remove_hooks()
        self._note_step_counting()
        return self.session.close(status)

    def _note_step_counting(self) -> None:
        """Steps are optimizer steps: a run that recorded ops but never stepped one is a single step, and says so."""
        try:
            if self.steps_seen == 0 and self.session.buffer.num_records:
                self.session.summary.note(NO_OPTIMIZER_STEP % self.session.step)
        except Exception as exc:  # never break training
            self.session.summary.failed("counting steps", exc)

    def optimizer_stepped(self, optimizer: Any) -> None:
        """After an optimizer step: the primary optimizer's steps close the capture step and arm the next."""
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
            self._arm()
        except Exception as exc:  # never break training
            s.summary.failed("closing step %d" % step, exc)
        self.steps_seen += 1
        if self.on_step_end is not None:
            self.on_step_end(step, records)

"""free_benchmark's processor, framework-neutral (``engines.capture.processor``): the capture session (L1
interception, naming, step and rank filters, zero-code steps) with the checks in place of the record builder.
Nothing is dumped: each step's rows go to ``on_step(step, rows)`` when the step ends.

``build_session`` joins it to a framework: the adapter's capture session (``<adapter>.session.Session``, at L1, no
sink) whose API interception is the adapter's ``FreeBenchmarkCall`` (a ``calls.CallChecks``: the per-call control
flow, once for every framework) and, with ``backward``, its ``BackwardChecks``.
"""

from typing import Any, Callable, List, Optional

from engines.capture.options import CaptureOptions
from engines.capture.processor import CallProcessor
from engines.capture.session import CaptureSession
from engines.capture.summary import CaptureSummary
from engines.free_benchmark.backward import DEFAULT_HOLD_BYTES
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow


def build_session(adapter: Callable[[str], Any], options: CaptureOptions, fb: FreeBenchmarkOptions,
                  on_step: Optional[Callable[[int, List[CheckRow]], None]] = None,
                  summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                  hold_bytes: int = DEFAULT_HOLD_BYTES) -> CaptureSession:
    """The free_benchmark session of the framework whose adapter modules ``adapter(name)`` returns."""
    session: CaptureSession = adapter("session").Session(options.replace(level="L1"), None, summary=summary,
                                                         rank=rank)
    backward = adapter("free_benchmark_backward").BackwardChecks(session, fb, hold_bytes) if fb.backward else None
    checks = adapter("free_benchmark_call").FreeBenchmarkCall(session, fb, backward)
    return session.plug(FreeBenchmarkProcessor(fb, checks, backward, on_step))


class FreeBenchmarkProcessor(CallProcessor):
    def __init__(self, fb: FreeBenchmarkOptions, checks: Any, backward: Any,
                 on_step: Optional[Callable[[int, List[CheckRow]], None]] = None) -> None:
        self.fb = fb
        self.checks = checks  # the adapter's FreeBenchmarkCall: the session's API interception
        self.backward_checks = backward
        self.on_step = on_step
        self._rows: List[CheckRow] = []
        self._active = False

    session: CaptureSession

    def attach(self, session: CaptureSession) -> None:
        super().attach(session)
        session.api_capture = self.checks  # the adapter's sessions all have one
        ops = self.checks.ops
        if self.fb.preheat and not ops.preheat:
            session.summary.note("free_benchmark: preheat is not available on %s (as in msprobe); the fixed "
                                 "thresholds are used" % ops.framework)

    def before_flush(self) -> None:
        session = self.session
        self._rows = []
        self._active = bool(session.api_counter._counts)
        try:
            with session._busy:
                self._rows = self.checks.finish_step(session.step)
        except Exception as exc:  # never break training
            session.summary.failed("free_benchmark results of step %d" % session.step, exc)

    def after_flush(self) -> None:
        session = self.session
        rows, self._rows = self._rows, []
        if (self._active or rows) and self.on_step is not None:
            try:
                self.on_step(session.step, rows)
            except Exception as exc:
                session.summary.failed("writing the free_benchmark results of step %d" % session.step, exc)

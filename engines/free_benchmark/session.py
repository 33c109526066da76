"""free_benchmark's session, framework-neutral: the capture session (L1 interception, naming, step and rank
filters, zero-code steps) with the checks in place of the record builder. Nothing is dumped: each step's rows go
to ``on_step(step, rows)`` when the step ends.

``FreeBenchmarkSteps`` goes first in the bases and names the adapter's checks::

    class FreeBenchmarkSession(FreeBenchmarkSteps, TorchCaptureSession):
        backward_class = BackwardChecks
        call_class = FreeBenchmarkCall

and builds the capture session at L1 with no sink.
"""

from typing import TYPE_CHECKING, Any, Callable, List, Optional

from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.free_benchmark.backward import DEFAULT_HOLD_BYTES
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow

if TYPE_CHECKING:  # the mixin's type checks see the capture session it goes in front of
    from engines.capture.session import CaptureSession as _Session
else:
    _Session = object


class FreeBenchmarkSteps(_Session):
    #: the adapter's ``BackwardChecks`` and ``FreeBenchmarkCall`` (a ``calls.CallChecks``)
    backward_class: Callable[..., Any]
    call_class: Callable[..., Any]

    def __init__(self, options: CaptureOptions, fb: FreeBenchmarkOptions,
                 on_step: Optional[Callable[[int, List[CheckRow]], None]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                 hold_bytes: int = DEFAULT_HOLD_BYTES) -> None:
        # the framework's capture session, next in the bases
        super().__init__(options.replace(level="L1"), None, summary=summary, rank=rank)
        self.fb = fb
        self.backward_checks = self.backward_class(self, fb, hold_bytes) if fb.backward else None
        self.api_capture = self.call_class(self, fb, self.backward_checks)
        self.on_step = on_step
        ops = self.api_capture.ops
        if fb.preheat and not ops.preheat:
            self.summary.note("free_benchmark: preheat is not available on %s (as in msprobe); the fixed "
                              "thresholds are used" % ops.framework)

    @property
    def checks(self) -> Any:
        return self.api_capture

    def flush(self) -> None:
        rows: List[CheckRow] = []
        active = bool(self.api_counter._counts)
        try:
            with self._busy:
                rows = self.api_capture.finish_step(self.step)
        except Exception as exc:  # never break training
            self.summary.failed("free_benchmark results of step %d" % self.step, exc)
        super().flush()
        if (active or rows) and self.on_step is not None:
            try:
                self.on_step(self.step, rows)
            except Exception as exc:
                self.summary.failed("writing the free_benchmark results of step %d" % self.step, exc)

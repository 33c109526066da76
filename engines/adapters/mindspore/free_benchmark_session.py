"""free_benchmark on MindSpore: the capture session (L1 wrappers, naming, step and rank filters, zero-code steps)
with ``FreeBenchmarkCall`` in place of the record builder. Nothing is dumped: each step's rows go to
``on_step(step, rows)`` when the step ends."""

from typing import Callable, List, Optional

from engines.adapters.mindspore.free_benchmark_backward import DEFAULT_HOLD_BYTES, BackwardChecks
from engines.adapters.mindspore.free_benchmark_call import FreeBenchmarkCall
from engines.adapters.mindspore.session import MindSporeCaptureSession, detect_rank  # noqa: F401 (the engine uses it)
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow


class FreeBenchmarkSession(MindSporeCaptureSession):
    def __init__(self, options: CaptureOptions, fb: FreeBenchmarkOptions,
                 on_step: Optional[Callable[[int, List[CheckRow]], None]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                 hold_bytes: int = DEFAULT_HOLD_BYTES) -> None:
        super().__init__(options.replace(level="L1"), None, summary=summary, rank=rank)
        self.fb = fb
        self.backward_checks = BackwardChecks(self, fb, hold_bytes) if fb.backward else None
        self.api_capture = FreeBenchmarkCall(self, fb, self.backward_checks)
        self.on_step = on_step
        if fb.preheat:
            self.summary.note("free_benchmark: preheat is not available on MindSpore (as in msprobe); the fixed "
                              "thresholds are used")

    @property
    def checks(self) -> FreeBenchmarkCall:
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

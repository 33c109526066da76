"""free_benchmark's session, framework-neutral: the capture session (L1 interception, naming, step and rank
filters, zero-code steps) with the checks in place of the record builder. Nothing is dumped: each step's rows go
to ``on_step(step, rows)`` when the step ends.

``FreeBenchmarkSteps`` goes first in the bases (``class FreeBenchmarkSession(FreeBenchmarkSteps,
TorchCaptureSession)``); the adapter's ``__init__`` builds the session at L1 with no sink and calls
``init_free_benchmark`` with its ``BackwardChecks`` and ``FreeBenchmarkCall`` classes.
"""

from typing import Any, Callable, List, Optional

from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow


class FreeBenchmarkSteps:
    def init_free_benchmark(self, fb: FreeBenchmarkOptions, on_step: Optional[Callable[[int, List[CheckRow]], None]],
                            backward_checks: Callable[..., Any], call_checks: Callable[..., Any],
                            hold_bytes: int) -> None:
        self.fb = fb
        self.backward_checks = backward_checks(self, fb, hold_bytes) if fb.backward else None
        self.api_capture = call_checks(self, fb, self.backward_checks)
        self.on_step = on_step

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

"""free_benchmark on PyTorch (``engines.free_benchmark.session``): the torch capture session with
``FreeBenchmarkCall`` in place of the record builder."""

from typing import Callable, List, Optional

from engines.adapters.torch.free_benchmark_backward import DEFAULT_HOLD_BYTES, BackwardChecks
from engines.adapters.torch.free_benchmark_call import FreeBenchmarkCall
from engines.adapters.torch.session import TorchCaptureSession, detect_rank  # noqa: F401 (the engine uses it)
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow
from engines.free_benchmark.session import FreeBenchmarkSteps


class FreeBenchmarkSession(FreeBenchmarkSteps, TorchCaptureSession):
    def __init__(self, options: CaptureOptions, fb: FreeBenchmarkOptions,
                 on_step: Optional[Callable[[int, List[CheckRow]], None]] = None,
                 summary: Optional[CaptureSummary] = None, rank: Optional[int] = None,
                 hold_bytes: int = DEFAULT_HOLD_BYTES) -> None:
        TorchCaptureSession.__init__(self, options.replace(level="L1"), None, summary=summary, rank=rank)
        self.init_free_benchmark(fb, on_step, BackwardChecks, FreeBenchmarkCall, hold_bytes)

"""overflow_check on PyTorch: the capture session with a different processor.

The logic (classification, keeping the flagged calls, the limit) is framework-neutral: ``engines.overflow.session``.
Here: the torch session underneath and the torch finiteness tests (``OverflowEntries``).
"""

from typing import Any, Callable, Optional

from engines.adapters.torch.overflow_entries import OverflowEntries
from engines.adapters.torch.session import TorchCaptureSession, detect_rank  # noqa: F401 (engine uses it)
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.overflow.report import StepFindings
from engines.overflow.session import DEFAULT_BATCH_RECORDS, DEFAULT_HOLD_BYTES, OverflowChecks, forward_of  # noqa: F401


class OverflowSession(OverflowChecks, TorchCaptureSession):
    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]],
                 summary: Optional[CaptureSummary] = None, overflow_nums: int = 1,
                 on_step: Optional[Callable[[StepFindings], None]] = None, rank: Optional[int] = None,
                 batched: bool = False, hold_bytes: int = DEFAULT_HOLD_BYTES,
                 batch_records: int = DEFAULT_BATCH_RECORDS) -> None:
        TorchCaptureSession.__init__(self, options, sink_factory, summary=summary, rank=rank)
        self.entries = OverflowEntries(self.summary, batched=batched)
        self.init_overflow(overflow_nums, on_step, hold_bytes, batch_records)

    def requires_grad_flag(self, t: Any) -> int:
        return 1 if t.requires_grad else 0

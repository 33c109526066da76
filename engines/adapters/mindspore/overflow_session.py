"""overflow_check on MindSpore: the MindSpore capture session with overflow_check's processor.

The logic (classification, keeping the flagged calls, the limit) is framework-neutral
(``engines.overflow.session``, shared with PyTorch); here: the MindSpore session underneath and the MindSpore
finiteness tests (``OverflowEntries``).
"""

from typing import Any, Callable, Optional

from engines.adapters.mindspore.overflow_entries import OverflowEntries
from engines.adapters.mindspore.session import MindSporeCaptureSession, detect_rank  # noqa: F401 (engine uses it)
from engines.adapters.mindspore.session import requires_grad as _requires_grad
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.overflow.report import StepFindings
from engines.overflow.session import DEFAULT_BATCH_RECORDS, DEFAULT_HOLD_BYTES, OverflowChecks


class OverflowSession(OverflowChecks, MindSporeCaptureSession):
    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]],
                 summary: Optional[CaptureSummary] = None, overflow_nums: int = 1,
                 on_step: Optional[Callable[[StepFindings], None]] = None, rank: Optional[int] = None,
                 batched: bool = False, hold_bytes: int = DEFAULT_HOLD_BYTES,
                 batch_records: int = DEFAULT_BATCH_RECORDS) -> None:
        MindSporeCaptureSession.__init__(self, options, sink_factory, summary=summary, rank=rank)
        self.entries = OverflowEntries(self.summary, batched=batched)
        self.init_overflow(overflow_nums, on_step, hold_bytes, batch_records)

    def requires_grad_flag(self, t: Any) -> int:
        return 1 if _requires_grad(t) else 0

"""Zero code change for PyTorch scripts (``engines.capture.zero_code``): steps are torch's optimizer steps.

torch's global optimizer-step hook closes the step after each ``optimizer.step()``; a global module pre-hook,
registered before the session's own module hooks so it runs first, starts recording at the step's first
``nn.Module`` call.
"""

from typing import Any, Callable, Optional

import torch

from engines.adapters.torch.session import TorchCaptureSession
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.capture.zero_code import ZeroCode


class ZeroCodeCapture(ZeroCode):
    def __init__(self, options: CaptureOptions, sink_factory: Optional[Callable[[int], Any]],
                 summary: Optional[CaptureSummary] = None,
                 on_step_end: Optional[Callable[[int, int], None]] = None,
                 session: Optional[TorchCaptureSession] = None) -> None:
        # ``session``: a session built by the caller (overflow_check and free_benchmark bring their own).
        super().__init__(session or TorchCaptureSession(options, sink_factory, summary=summary), on_step_end)
        self._handle = None
        self._arm_handle = None

    def _install_step_hook(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._after_optimizer_step)

    def _arm(self) -> None:
        """Install everything, but record only from the next module call on."""
        from torch.nn.modules.module import register_module_forward_pre_hook

        if self._arm_handle is None:
            # Registered before the session's own module hooks, so it runs first on that call.
            self._arm_handle = register_module_forward_pre_hook(self._on_module_call)
        self.session.arm()

    def _on_module_call(self, module: Any, args: Any) -> None:
        if type(module).__name__ == "OptimizedModule":
            from engines.adapters.torch.module_capture import COMPILED_NOTE

            self.session.summary.note(COMPILED_NOTE)
        if self._arm_handle is not None:
            self._arm_handle.remove()
            self._arm_handle = None
        self.session.begin_recording()
        return None

    def _remove_hooks(self) -> None:
        if self._arm_handle is not None:
            self._arm_handle.remove()
            self._arm_handle = None
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.optimizer_stepped(optimizer)

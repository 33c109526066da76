"""free_benchmark's backward stage (docs/reference/msprobe-tasks.md §8.2, F6), the framework-neutral part: which calls are checked,
the memory cap on the inputs held until backward, and the rows of the compared input gradients.

The adapter's ``BackwardChecks`` re-runs a checked call through its vector-Jacobian product, as it ran and
perturbed, with the output gradients the training's backward delivered, and compares each input's two gradients
(tolerance floor ``BACKWARD_ABS_TOL``). The training's own gradients are untouched.
"""

import os
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

from engines.free_benchmark import structure
from engines.free_benchmark import thresholds as th
from engines.free_benchmark.calls import Pending, judge
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.perturb import Cancelled
from engines.free_benchmark.results import CheckRow

DEFAULT_HOLD_BYTES = int(float(os.environ.get("PROBE_TUI_FB_BACKWARD_HOLD_MB", "1024")) * (1 << 20))

SKIP_NO_GRAD = "skipped (backward): no input requires grad"
SKIP_CAP = "skipped (backward): memory cap for inputs held until backward"
SKIP_CHANGED = "skipped (backward): an input changed in place before backward"
SKIP_NO_OUTPUT = "skipped (backward): no output carries a gradient"
SKIP_NO_GRADS = "skipped (backward): no output gradient arrived"


class BackwardChecksBase:
    is_tensor: Callable[[Any], bool]

    def __init__(self, session: Any, options: FreeBenchmarkOptions, hold_bytes: int = DEFAULT_HOLD_BYTES) -> None:
        self.session = session
        self.fb = options
        self.hold_bytes = hold_bytes
        self.held_bytes = 0
        self.pending: List[Pending] = []
        self.skipped: Counter = Counter()
        self.checked = 0

    def differentiable(self, args: tuple, kwargs: Dict[str, Any], wanted: Callable[[Any], bool],
                       nbytes_of: Callable[[Any], int], grad_enabled: bool = True
                       ) -> Optional[Tuple[List[Tuple[Tuple, Any]], int]]:
        """``([(path, tensor)] of the inputs whose gradients are compared, their bytes)``; None (the reason
        counted) when the call is not checked: no such input, or the memory cap."""
        found: List[Tuple[Tuple, Any]] = []
        structure.paths((tuple(args), dict(kwargs)), self.is_tensor, (), found)
        diff = [(p, t) for p, t in found if wanted(t)]
        if not diff or not grad_enabled:
            self.skipped[SKIP_NO_GRAD] += 1
            return None
        nbytes = sum(nbytes_of(t) for _, t in diff)
        if self.held_bytes + nbytes > self.hold_bytes:
            self.skipped[SKIP_CAP] += 1
            return None
        return diff, nbytes

    def perturbed(self, perturb: Callable[..., Any], inputs: tuple, **options: Any) -> Any:
        """The perturbed inputs (the adapter's ``perturb`` on them as positional arguments); None (the reason
        counted) when the mode does not apply."""
        try:
            return perturb(self.fb.pert_mode, inputs, {}, 0, **options)
        except Cancelled as exc:
            self.skipped["skipped (backward): %s" % exc] += 1
            return None

    def row(self, name: str, index: int, original: Any, threshold_dtype: str) -> CheckRow:
        """The row of input ``index``'s gradient (``original``: the gradient as the call ran)."""
        fb = self.fb
        return CheckRow(self.session.step, name, "backward", fb.pert_mode, fb.handler_type, index,
                        str(original.dtype), str(list(original.shape)),
                        threshold=th.ratio_threshold(threshold_dtype, fb.pert_mode))

    def compared(self, name: str, index: int, original: Any, ratio: Any, threshold_dtype: str) -> None:
        """A compared input gradient, its ratio still on the device."""
        self.pending.append(Pending(self.row(name, index, original, threshold_dtype), ratio))

    def judged(self, resolve: Callable[[List[Any]], List[float]]) -> List[CheckRow]:
        pending, self.pending = self.pending, []
        return judge(pending, resolve)

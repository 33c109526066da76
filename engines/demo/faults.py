"""What each injectable fault does, as numbers (docs/decisions/0015-demo-faults-by-numeric-effect.md), and when it is active.

The framework builds (PyTorch now, MindSpore later) implement the effects; this module holds the constants and
the schedule so both builds agree on them:

- ``fp16_overflow {layer, from_step}``: block ``layer``'s attention logits are multiplied by
  ``FP16_OVERFLOW_SCALE``, cast to float16 (still finite) and exponentiated in float16 by ``exp``, which gives
  +inf wherever a logit exceeds ln(65504) / FP16_OVERFLOW_SCALE. That ``exp`` is the first op producing inf; its
  input is finite; the loss becomes NaN.
- ``lowp_softmax {layer, from_step}``: block ``layer``'s attention softmax runs in bfloat16 without
  max-subtraction (exp, sum and division in bf16); relative error >= 1e-2 against the float32 softmax.
- ``wrong_eps {layer}``: block ``layer``'s first LayerNorm (``blocks.<layer>.ln1``) uses eps = ``WRONG_EPS``.
- ``grad_explosion {step, layer, scale}``: on step ``step`` only, the gradient entering block ``layer`` from
  above is multiplied by ``scale`` and divided by it again where it leaves the block, so that block's parameter
  gradients (and the backward ops inside it) jump by ``scale`` while other blocks see their usual gradients.
"""

from typing import List, Optional

from engines.demo.knobs import DemoFaults

LAYER_NORM_EPS = 1e-5
WRONG_EPS = 1e-1
FP16_OVERFLOW_SCALE = 1e3
FP16_MAX = 65504.0


class FaultSchedule:
    """Which faults are on at the current step. The training loop sets ``step`` before each forward."""

    def __init__(self, faults: DemoFaults) -> None:
        self.faults = faults
        self.step = 0

    def fp16_overflow(self, layer: int) -> bool:
        fault = self.faults.fp16_overflow
        return fault is not None and fault.layer == layer and self.step >= fault.from_step

    def lowp_softmax(self, layer: int) -> bool:
        fault = self.faults.lowp_softmax
        return fault is not None and fault.layer == layer and self.step >= fault.from_step

    def layer_norm_eps(self, layer: int) -> float:
        """The eps of ``blocks.<layer>.ln1`` (fixed at build time)."""
        fault = self.faults.wrong_eps
        return WRONG_EPS if fault is not None and fault.layer == layer else LAYER_NORM_EPS

    def grad_scale(self, layer: int) -> Optional[float]:
        """The gradient multiplier for block ``layer`` on this step, or None."""
        fault = self.faults.grad_explosion
        if fault is not None and fault.layer == layer and self.step == fault.step:
            return fault.scale
        return None


def describe(faults: DemoFaults) -> List[str]:
    """One human-readable line per active fault, for logs and run summaries."""
    lines = []
    if faults.fp16_overflow is not None:
        f = faults.fp16_overflow
        lines.append(f"fp16_overflow: float16 exp of block {f.layer}'s attention logits x{FP16_OVERFLOW_SCALE:g} "
                     f"overflows from step {f.from_step}")
    if faults.lowp_softmax is not None:
        f = faults.lowp_softmax
        lines.append(f"lowp_softmax: block {f.layer}'s attention softmax in bf16 without max-subtraction "
                     f"from step {f.from_step}")
    if faults.wrong_eps is not None:
        lines.append(f"wrong_eps: blocks.{faults.wrong_eps.layer}.ln1 uses eps={WRONG_EPS:g}")
    if faults.grad_explosion is not None:
        g = faults.grad_explosion
        lines.append(f"grad_explosion: block {g.layer}'s gradients x{g.scale:g} at step {g.step}")
    return lines

"""The built-in demo model, framework-neutral parts: knobs, seed-generated numpy weights and batches, faults.

The PyTorch build lives in ``engines.adapters.torch.demo`` (a MindSpore build will follow the same contract:
``train(knobs, *, on_step=None)`` starting from ``initial_weights(knobs)`` on ``data.batches(knobs)``).
Importing this package imports no framework.
"""

from engines.demo.knobs import PRESETS, DemoFaults, DemoKnobError, DemoKnobs, resolve_knobs

__all__ = ["PRESETS", "DemoFaults", "DemoKnobError", "DemoKnobs", "resolve_knobs"]

"""The layer-wise view of two runs: per layer, the ratio of gradient norms (target / golden), ordered by depth.

A parameter's layer is its name up to the first numeric component (``layers.3.attn.qkv.weight`` -> ``layers.3``:
a transformer block), else its owning module (``embed.weight`` -> ``embed``). Layers are ordered by the first
appearance of their parameters in the dump, which is the model's definition order: depth 0 is the layer nearest
the input. A layer's gradient norm is ``sqrt(sum of its parameters' norm^2)``.

Gradient errors travel backward, from the loss to the input, and grow on the way (the pattern users report most
often). The layer that *starts* the growth is the first one over tolerance when walking from the last layer to
the first: that is the layer marked ``first_over``.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np


def layer_of(param_name: str) -> str:
    parts = param_name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit() and i > 0:
            return ".".join(parts[: i + 1])
    return ".".join(parts[:-1]) if len(parts) > 1 else param_name


@dataclass
class LayerRatios:
    """``target[l, s]`` / ``golden[l, s]``: layer norms; ``ratio = target / golden``; depth order."""

    layers: List[str]
    steps: List[int]
    target: np.ndarray
    golden: np.ndarray
    tolerance: float

    @property
    def ratio(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.target / self.golden

    @property
    def over(self) -> np.ndarray:
        deviation = np.abs(self.ratio - 1.0)
        return np.where(np.isnan(deviation), True, deviation > self.tolerance) & ~(
            np.isnan(self.target) & np.isnan(self.golden)
        )

    def first_over(self, step_index: int) -> Optional[int]:
        """Index of the first layer over tolerance walking from the last layer back to the first, or None."""
        over = self.over[:, step_index]
        for layer in range(len(self.layers) - 1, -1, -1):
            if over[layer]:
                return layer
        return None

    def first_step_over(self) -> Optional[int]:
        """Index of the first step at which some layer is over tolerance."""
        for s in range(len(self.steps)):
            if self.over[:, s].any():
                return s
        return None


def layer_ratios(
    params: Sequence[str],
    steps: Sequence[int],
    target_norms: np.ndarray,
    golden_norms: np.ndarray,
    tolerance: float,
) -> LayerRatios:
    """``*_norms[p, s]`` hold parameter gradient norms (NaN where absent) for ``params`` x ``steps``."""
    order: Dict[str, List[int]] = {}
    for p, name in enumerate(params):
        order.setdefault(layer_of(name), []).append(p)
    layers = list(order)

    def combine(norms: np.ndarray) -> np.ndarray:
        out = np.full((len(layers), len(steps)), np.nan)
        for i, layer in enumerate(layers):
            block = norms[order[layer]]
            present = ~np.isnan(block)
            squared = np.where(present, block, 0.0) ** 2
            out[i] = np.where(present.any(axis=0), np.sqrt(squared.sum(axis=0)), np.nan)
        return out

    return LayerRatios(layers, list(steps), combine(target_norms), combine(golden_norms), float(tolerance))

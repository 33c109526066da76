"""Direction similarity: the fraction of elements whose ``grad > 0`` bit agrees between two runs.

Both sides keep directions as packed bits (``numpy.packbits``), so a parameter's similarity is
``(numel - popcount(a XOR b)) / numel`` computed on the packed bytes (the padding bits are zero on both sides).
The per-step ``summary`` is the element-weighted mean over the parameters compared at that step.
"""

from dataclasses import dataclass
from typing import List, Union

import numpy as np

_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1).astype(np.int64)


def direction_similarity(packed_a: np.ndarray, packed_b: np.ndarray, numel: int) -> float:
    if numel == 0:
        return float("nan")
    if packed_a.shape != packed_b.shape:
        raise ValueError(f"packed directions differ in size: {packed_a.size} vs {packed_b.size} bytes")
    mismatches = int(_POPCOUNT[np.bitwise_xor(packed_a, packed_b)].sum())
    return (numel - mismatches) / float(numel)


@dataclass
class SimilarityTable:
    """``values[p, s]``: similarity of parameter ``params[p]`` at step ``steps[s]`` (NaN where not compared)."""

    steps: List[int]
    params: List[str]
    numels: np.ndarray
    values: np.ndarray

    @property
    def summary(self) -> np.ndarray:
        """Element-weighted similarity per step over the parameters compared at that step."""
        weights = np.where(np.isnan(self.values), 0.0, self.numels[:, None].astype(np.float64))
        total = weights.sum(axis=0)
        weighted = np.nansum(self.values * weights, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, weighted / np.where(total > 0, total, 1.0), np.nan)

    def rows(self) -> List[list]:
        """msprobe's ``similarities.csv`` body: one row per parameter, then ``summary``."""
        out = [[name, *[_cell(v) for v in self.values[p]]] for p, name in enumerate(self.params)]
        out.append(["summary", *[_cell(v) for v in self.summary]])
        return out


def _cell(value: float) -> Union[float, str]:
    return "" if np.isnan(value) else float(value)

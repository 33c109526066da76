"""One optimizer step's gradient statistics, as plain numpy arrays: what the adapters' hooks hand to the writers."""

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np


@dataclass
class GradStepStats:
    """Statistics of every recorded parameter at one optimizer step, in optimizer order.

    ``directions`` holds every parameter's ``grad > 0`` bits packed with ``numpy.packbits`` (big-endian bit
    order), each parameter starting on a byte boundary at ``dir_offsets[i]`` and spanning ``ceil(numel / 8)``
    bytes; ``hist`` holds the fraction of elements in each right-closed ``bounds`` interval.
    """

    step: int
    names: List[str]
    shapes: List[Tuple[int, ...]]
    dtypes: List[str]
    numels: np.ndarray
    max: np.ndarray
    min: np.ndarray
    norm: np.ndarray
    crc32: Optional[np.ndarray] = None
    hist: Optional[np.ndarray] = None
    zero_frac: Optional[np.ndarray] = None
    directions: Optional[np.ndarray] = None
    dir_offsets: Optional[np.ndarray] = None
    skipped: List[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.names)

    def direction(self, index: int) -> np.ndarray:
        """The bool array ``grad > 0`` of parameter ``index``, flattened."""
        if self.directions is None or self.dir_offsets is None:
            raise ValueError("this level records no directions")
        numel = int(self.numels[index])
        start = int(self.dir_offsets[index])
        packed = self.directions[start:start + (numel + 7) // 8]
        return np.unpackbits(packed, count=numel).astype(bool)


def packed_size(numel: int) -> int:
    return (int(numel) + 7) // 8


def from_rows(step: int, names: List[str], shapes: List[Tuple[int, ...]], dtypes: List[str], numels: np.ndarray,
              rows: np.ndarray, histogram: bool) -> GradStepStats:
    """The statistics of one step from the per-parameter rows the adapter moved to the host: max, min, norm and,
    with ``histogram``, the zero count and the counts ``grad <= b`` for every bound."""
    stats = GradStepStats(step=step, names=names, shapes=shapes, dtypes=dtypes, numels=numels,
                          max=rows[:, 0].copy(), min=rows[:, 1].copy(), norm=rows[:, 2].copy())
    if histogram:
        safe = np.maximum(numels, 1).astype(np.float64)
        stats.zero_frac = np.where(numels > 0, rows[:, 3] / safe, np.nan)
        le = rows[:, 4:]
        counts = np.diff(np.concatenate([np.zeros((len(names), 1)), le, numels[:, None].astype(np.float64)],
                                        axis=1), axis=1)
        stats.hist = np.where(numels[:, None] > 0, counts / safe[:, None], np.nan)
    return stats


def direction_offsets(numels: Sequence[int]) -> np.ndarray:
    """Where each parameter's packed direction bits start (each on a byte boundary)."""
    offsets = np.zeros(len(numels), dtype=np.int64)
    position = 0
    for i, numel in enumerate(numels):
        offsets[i] = position
        position += packed_size(numel)
    return offsets

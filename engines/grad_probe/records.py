"""One optimizer step's gradient statistics, as plain numpy arrays: what the torch hook hands to the writers."""

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

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

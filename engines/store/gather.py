"""Reading global arrays that segment files cut into pieces.

Every table column, the string table and each pool is one global array. Segment ``s`` holds elements
``[base[s], end[s])`` of it, stored from local position 0. These helpers read ranges or arbitrary element lists
across segments with one HDF5 read per segment touched.
"""

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

#: read(segment index, local start, local stop) -> array; only called for non-empty pieces
ReadFn = Callable[[int, int, int], np.ndarray]
PointsFn = Callable[[int, np.ndarray], np.ndarray]

Ranges = List[Tuple[int, int]]


def merge_ranges(ranges: Sequence[Tuple[int, int]]) -> Ranges:
    out: Ranges = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def ranges_to_indices(ranges: Ranges) -> np.ndarray:
    if not ranges:
        return np.empty(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def _empty(dtype, tail: Tuple[int, ...]) -> np.ndarray:
    return np.empty((0,) + tail, dtype=dtype)


def read_ranges(ranges: Ranges, base: np.ndarray, end: np.ndarray, read: ReadFn, dtype,
                tail: Tuple[int, ...] = ()) -> np.ndarray:
    """Concatenate global ``ranges`` of one array. ``base``/``end`` give each segment's slice of it."""
    pieces = []
    for a, b in ranges:
        first = int(np.searchsorted(end, a, side="right"))
        for s in range(first, len(base)):
            lo, hi = max(a, int(base[s])), min(b, int(end[s]))
            if int(base[s]) >= b:
                break
            if hi > lo:
                pieces.append(read(s, lo - int(base[s]), hi - int(base[s])))
    if not pieces:
        return _empty(dtype, tail)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def read_points(indices: np.ndarray, base: np.ndarray, end: np.ndarray, read: ReadFn,
                points: Optional[PointsFn], dtype, tail: Tuple[int, ...] = ()) -> np.ndarray:
    """Elements at global ``indices`` (any order, repeats allowed), in that order."""
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size == 0:
        return _empty(dtype, tail)
    uniq, inverse = np.unique(indices, return_inverse=True)
    out = np.empty((len(uniq),) + tail, dtype=dtype)
    seg_of = np.searchsorted(end, uniq, side="right")
    bounds = np.flatnonzero(np.diff(seg_of)) + 1
    for part in np.split(np.arange(len(uniq)), bounds):
        s = int(seg_of[part[0]])
        local = uniq[part] - int(base[s])
        lo, hi = int(local[0]), int(local[-1]) + 1
        if points is None or hi - lo <= 8 * len(local) + 4096:
            out[part] = read(s, lo, hi)[local - lo]
        else:  # sparse: a point selection beats reading the whole span
            out[part] = points(s, local)
    return out[inverse]

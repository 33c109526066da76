"""Plans for reading global arrays that segment files cut into pieces.

Every table column, the string table and each pool is one global array. Segment ``s`` holds elements
``[base[s], end[s])`` of it, stored from local position 0. A plan lists, per segment touched, what to read there,
so a reader visits each segment once for all the columns it wants (per-step stores have thousands of files).
"""

from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

Ranges = List[Tuple[int, int]]


class Piece(NamedTuple):
    segment: int
    lo: int  # local span to read
    hi: int
    take: Optional[np.ndarray]  # local positions wanted, relative to lo (None: the whole span, in order)
    dest: Optional[np.ndarray]  # where they go in the output (None: appended in order)


def unique_inverse(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for int64 ids; a lookup table instead of a sort when the
    values span a range not much larger than their count (string ids and row numbers usually do)."""
    values = np.asarray(values, dtype=np.int64).reshape(-1)
    if values.size == 0:
        return values.copy(), np.empty(0, dtype=np.int64)
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span > 4 * values.size + (1 << 20):
        uniq, inverse = np.unique(values, return_inverse=True)
        return uniq, inverse.reshape(-1)
    shifted = values - lo
    present = np.zeros(span, dtype=bool)
    present[shifted] = True
    uniq = np.flatnonzero(present)
    position = np.empty(span, dtype=np.int64)
    position[uniq] = np.arange(len(uniq), dtype=np.int64)
    return uniq + lo, position[shifted]


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


def plan_ranges(ranges: Ranges, base: np.ndarray, end: np.ndarray) -> List[Piece]:
    """Pieces covering global ``ranges`` in order, one per (range, segment) overlap."""
    pieces = []
    for a, b in ranges:
        for s in range(int(np.searchsorted(end, a, side="right")), len(base)):
            if int(base[s]) >= b:
                break
            lo, hi = max(a, int(base[s])), min(b, int(end[s]))
            if hi > lo:
                pieces.append(Piece(s, lo - int(base[s]), hi - int(base[s]), None, None))
    return pieces


def plan_points(indices: np.ndarray, base: np.ndarray, end: np.ndarray,
                sparse_ok: bool = True) -> Tuple[int, np.ndarray, List[Piece]]:
    """Pieces reading the elements at global ``indices`` (any order, repeats allowed).

    Returns ``(n_unique, inverse, pieces)``: fill an array of ``n_unique`` from the pieces, then index it with
    ``inverse``. A segment's span is read whole unless it is much longer than what is wanted from it
    (``take`` is then absolute and ``lo == hi == -1``: use a point selection)."""
    uniq, inverse = unique_inverse(indices)
    if uniq.size == 0:
        return 0, inverse, []
    seg_of = np.searchsorted(end, uniq, side="right")
    pieces = []
    bounds = np.flatnonzero(np.diff(seg_of)) + 1
    for part in np.split(np.arange(len(uniq)), bounds):
        s = int(seg_of[part[0]])
        local = uniq[part] - int(base[s])
        lo, hi = int(local[0]), int(local[-1]) + 1
        if sparse_ok and hi - lo > 8 * len(local) + 4096:
            pieces.append(Piece(s, -1, -1, local, part))
        else:
            pieces.append(Piece(s, lo, hi, local - lo, part))
    return len(uniq), inverse, pieces

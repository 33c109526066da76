"""Which earlier output fed each input, recovered from the target dump itself, and what it tells the ranking.

Dumps do not record dataflow, but a tensor passed from one op to the next is the same tensor: same dtype, shape
and max/min/mean/norm (and hash when dumped). So each input row is linked to the latest earlier output row
with an identical fingerprint (vectorised: one sort, one binary search). Two findings come from the links:

- **target-only regions**: ops of the target with no golden counterpart (a fault implemented as several ops,
  an NPU fused kernel split differently) are unmatched and have no error of their own; the error they add shows
  up at the first matched op that consumes their output. Walking the links back from that consumer through
  unmatched ops gives the region, its input error (the matched outputs feeding it) and its output error.
- **gaps**: a matched input whose error is far above the error of the matched output that produced it — the
  golden ran something in between that the target did not (ops only in the golden).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from engines.dumps.rows import (
    IO_INPUT,
    IO_OUTPUT,
    IO_PARAM,
    KIND_API,
    V_MAX,
    V_MEAN,
    V_MIN,
    V_NORM,
    factorize,
)

ALL_STATS = V_MAX | V_MIN | V_MEAN | V_NORM
OUT_SLOT = "input.out"  # an out= buffer: the op's result (engines/capture/api.py), not an input it consumes
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9),
        np.uint64(0x27D4EB2F165667C5), np.uint64(0x94D049BB133111EB))


def fingerprints(cols: Dict[str, np.ndarray]) -> np.ndarray:
    """A 64-bit fingerprint of each target row's tensor (dtype, shape, statistics); 0 where unusable."""
    dtype_codes, _ = factorize(cols["target_dtype"])
    shape_codes, _ = factorize(cols["target_shape"])
    with np.errstate(over="ignore"):
        h = (dtype_codes.astype(np.uint64) + np.uint64(1)) * _MIX[0]
        h ^= (shape_codes.astype(np.uint64) + np.uint64(7)) * _MIX[1]
        for k, s in enumerate(("t_max", "t_min", "t_mean", "t_norm")):
            bits = np.ascontiguousarray(cols[s], dtype=np.float64).view(np.uint64)
            h ^= (bits + np.uint64(k)) * _MIX[k + 1]
            h = (h << np.uint64(13)) | (h >> np.uint64(51))
    usable = (cols["t_valid"] & ALL_STATS) == ALL_STATS
    out = h.view(np.int64).copy()
    out[~usable] = 0
    return out


def out_slot_rows(cols: Dict[str, np.ndarray]) -> np.ndarray:
    """Rows of ``out=`` buffers (``input.out``, ``input.out.0``): the result written into an argument."""
    slots = cols["slot"]
    codes, uniques = factorize(slots)
    is_out = np.array([str(u) == OUT_SLOT or str(u).startswith(OUT_SLOT + ".") for u in uniques.tolist()],
                      dtype=bool)
    return is_out[codes] if len(uniques) else np.zeros(slots.shape[0], dtype=bool)


def producers(cols: Dict[str, np.ndarray], api_only: bool) -> np.ndarray:
    """For every input/parameter row, the latest earlier output row with the same fingerprint (-1 none)."""
    n = cols["io"].shape[0]
    out = np.full(n, -1, dtype=np.int64)
    fp = fingerprints(cols)
    io = cols["io"]
    order = cols["order"].astype(np.int64)
    is_out = (io == IO_OUTPUT) & (fp != 0)
    if api_only:
        is_out &= cols["kind"] == KIND_API
    is_in = ((io == IO_INPUT) | (io == IO_PARAM)) & (fp != 0) & ~out_slot_rows(cols)
    if not is_out.any() or not is_in.any():
        return out
    _, inverse = np.unique(fp, return_inverse=True)
    key_rank = inverse.reshape(-1).astype(np.int64)
    span = int(order.max()) + 2
    out_rows = np.flatnonzero(is_out)
    composite = key_rank[out_rows] * span + order[out_rows]
    sort = np.argsort(composite, kind="stable")
    composite, out_rows = composite[sort], out_rows[sort]
    in_rows = np.flatnonzero(is_in)
    query = key_rank[in_rows] * span + order[in_rows]
    pos = np.searchsorted(composite, query, side="left") - 1
    ok = pos >= 0
    cand = out_rows[np.maximum(pos, 0)]
    ok &= key_rank[cand] == key_rank[in_rows]
    out[in_rows[ok]] = cand[ok]
    return out


def target_only_regions(cols: Dict[str, np.ndarray], record_codes: np.ndarray, producer: np.ndarray,
                        candidate_rows: np.ndarray, rel: Optional[np.ndarray] = None,
                        feed: Optional[np.ndarray] = None) -> List[Tuple[List[int], float, float, List[int]]]:
    """Regions of unmatched records feeding matched inputs.

    ``candidate_rows``: matched input rows whose producer is an unmatched row. Returns, per region, (record codes
    in the region, input error (largest error of the matched outputs feeding it), output error (largest error of
    the matched inputs it feeds), those consumer rows). ``rel``: each row's error (default ``rel_err``);
    ``feed``: the error a matched output row carries into the region (default its ``rel``). The input error is
    NaN when no matched output feeds the region (its inputs were not dumped, or came from nowhere in the dump).
    """
    if not candidate_rows.size:
        return []
    matched = cols["matched"]
    rel = cols["rel_err"] if rel is None else rel
    feed = rel if feed is None else feed
    rows_of: Dict[int, List[int]] = {}
    for i in np.flatnonzero(((cols["io"] == IO_INPUT) | (cols["io"] == IO_PARAM))).tolist():
        rows_of.setdefault(int(record_codes[i]), []).append(i)
    region_of: Dict[int, int] = {}
    regions: List[Tuple[set, float, float, List[int]]] = []
    for i in candidate_rows.tolist():
        start = int(record_codes[producer[i]])
        rid = region_of.get(start)
        if rid is None:
            members, in_err, stack, fed = set(), 0.0, [start], False
            while stack:
                rec = stack.pop()
                if rec in members:
                    continue
                members.add(rec)
                for row in rows_of.get(rec, ()):
                    p = producer[row]
                    if p < 0:
                        continue
                    if matched[p]:
                        fed = True
                        e = feed[p]
                        if e == e:
                            in_err = max(in_err, float(e))
                    else:
                        stack.append(int(record_codes[p]))
            rid = len(regions)
            for rec in members:
                region_of.setdefault(rec, rid)
            regions.append((members, in_err if fed else math.nan, 0.0, []))
        members, in_err, out_err, consumers = regions[rid]
        e = rel[i]
        if e == e:
            out_err = max(out_err, float(e))
        consumers.append(i)
        regions[rid] = (members, in_err, out_err, consumers)
    return [(sorted(m), a, b, c) for m, a, b, c in regions]

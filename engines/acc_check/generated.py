"""Inputs generated from a statistics dump's records (msprobe's random mode): each tensor input rebuilt from its
shape, dtype, min and max, seeded by the check's seed and the call's name, so that a rerun generates the same.

Floats are uniform in [min, max] with the first element set to min and the last to max; integers uniform in
[min, max]; bools from their min/max. A bound that is not finite (or missing) falls back to [-1, 1]: the
record's statistics say nothing usable about the values. The results of such calls are marked (their message
starts with ``inputs generated``): the outputs are not the training's but this machine's, run as recorded.
"""

import math
import zlib
from typing import Dict, List, Optional, Tuple

import numpy as np

from engines.acc_check import standards as st
from engines.acc_check.cases import dtype_name
from engines.dumps.rows import V_MAX, V_MIN, RowTable, parse_shape

SEED = 1234
MAX_ELEMENTS = 1 << 26  # a generated tensor above this many elements is not built (64 Mi elements)


def generated_inputs(table: RowTable, rows: List[int], record: str, seed: int = SEED
                     ) -> Tuple[Optional[Dict[str, Tuple[np.ndarray, str, List[int]]]], str]:
    """({slot: (array, dtype name, shape)}, "") for the tensor inputs of a record, or (None, why not)."""
    rng = np.random.default_rng([seed, zlib.crc32(record.encode("utf-8"))])
    out: Dict[str, Tuple[np.ndarray, str, List[int]]] = {}
    for r in rows:
        if not bool(table.is_tensor[r]):
            continue
        slot = str(table.slot[r])
        shape = parse_shape(str(table.shape[r]))
        dtype = str(table.dtype[r])
        if shape is None:
            return None, "%s has no shape to generate from" % slot
        numel = int(np.prod(shape)) if shape else 1
        if numel > MAX_ELEMENTS:
            return None, "%s is too large to generate (%d elements)" % (slot, numel)
        low, high = _bounds(table, r)
        out[slot] = (_values(rng, dtype, numel, low, high), dtype_name(dtype), list(shape))
    return out, ""


def _bounds(table: RowTable, r: int) -> Tuple[float, float]:
    valid = int(table.valid[r])
    low = float(table.min[r]) if valid & V_MIN else math.nan
    high = float(table.max[r]) if valid & V_MAX else math.nan
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        return -1.0, 1.0
    return low, high


def _values(rng: np.random.Generator, dtype: str, numel: int, low: float, high: float) -> np.ndarray:
    d = st.short_dtype(dtype)
    if d == "bool":
        return rng.integers(int(low), int(high) + 1, size=numel) > 0
    if d.startswith(("int", "uint")):
        return rng.integers(int(math.floor(low)), int(math.floor(high)) + 1, size=numel, dtype=np.int64)
    values = rng.uniform(low, high, size=numel)
    if numel:
        values[0] = low
        values[-1] = high
    if d == "bfloat16":
        return st.round_bf16(values.astype(np.float32))
    if d == "float16":
        return values.astype(np.float16)
    if d == "float64":
        return values
    return values.astype(np.float32)

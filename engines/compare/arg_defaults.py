"""Scalar keyword arguments compared with the callable's default.

Our PyTorch capture records a keyword argument only when it differs from the default of the callable's signature,
and keeps that default beside it in the record's ``defaults`` map (docs/CAPTURE.md). So when a target row such
as ``Functional.layer_norm.2.forward.input.eps`` has no golden row but the rest of its record matched, the golden
call used the default: the row gets the default as its golden value and the "scalar argument changed" finding,
and first divergence reports ``input.eps: 0.1 -> 1e-05``. The row stays unmatched (there is no golden row).
"""

import json
from typing import Any, Dict, Optional

import numpy as np

from engines.dumps.rows import RowTable
from engines.dumps.scalars import scalar_fields

_NUMERIC_COLUMNS = ("g_max", "g_min", "g_mean", "g_norm")


def flag_changed_defaults(cols: Dict[str, np.ndarray], flags: np.ndarray, t: RowTable, matched: np.ndarray,
                          changed_bit: int) -> None:
    if not t.args:
        return
    candidates = np.flatnonzero(~matched & ~t.is_tensor)
    if candidates.size == 0:
        return
    matched_records = set(t.record[matched].tolist())
    parsed: Dict[str, Optional[Dict[str, Any]]] = {}
    for i in candidates.tolist():
        record, slot = t.record[i], t.slot[i]
        if record not in t.args or record not in matched_records or not slot.startswith("input."):
            continue
        if record not in parsed:
            parsed[record] = _defaults(t.args[record])
        defaults = parsed[record]
        key = slot[len("input."):]
        if not defaults or key not in defaults:
            continue
        _, num, text, _ = scalar_fields(defaults[key])
        if text is not None:
            if text == t.text[i]:
                continue
            cols["g_text"][i] = text
        else:
            if num == t.max[i] and t.text[i] is None:
                continue
            for column in _NUMERIC_COLUMNS:
                cols[column][i] = num
            cols["g_valid"][i] = 15
        flags[i] |= changed_bit


def _defaults(args_json: str) -> Optional[Dict[str, Any]]:
    try:
        skeleton = json.loads(args_json)
    except ValueError:
        return None
    defaults = skeleton.get("defaults") if isinstance(skeleton, dict) else None
    return defaults if isinstance(defaults, dict) else None

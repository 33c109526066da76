"""Dtype names across frameworks: their class (float, int, bool, complex) and msprobe's dtype gate."""

from __future__ import annotations

import numpy as np

from engines.dumps.rows import factorize

_DTYPE_CLASS = (("complex", "complex"), ("bool", "bool"), ("float", "float"), ("half", "float"),
                ("double", "float"), ("int", "int"), ("uint", "int"))


def dtype_class(dtype: str) -> str:
    """``torch.float16``/``Float16``/``float16`` -> float; ints -> int; bool; complex; else the text itself."""
    base = dtype.lower().rsplit(".", 1)[-1]
    if base.startswith("<class '"):
        return base
    for prefix, cls in _DTYPE_CLASS:
        if base.startswith(prefix) or base.startswith("b" + prefix):
            return cls
    return base


def neutral_dtypes(dtypes: np.ndarray) -> np.ndarray:
    """Framework-neutral dtype names: ``torch.float32`` and MindSpore's ``Float32`` are both ``float32``
    (computed once per distinct dtype: a million rows hold a handful)."""
    codes, uniques = factorize(np.asarray(dtypes, dtype=object))
    names = np.empty(len(uniques), dtype=object)
    names[:] = [str(d).lower().rsplit(".", 1)[-1] for d in uniques.tolist()]
    return names[codes]


def dtype_compatible(a: str, b: str, cross_framework: bool) -> bool:
    """msprobe's dtype gate: equal, both floating, or (across frameworks) the same class."""
    if a == b:
        return True
    ca, cb = dtype_class(a), dtype_class(b)
    if ca == "float" and cb == "float":
        return True
    return cross_framework and ca == cb and ca in ("int", "bool", "complex")

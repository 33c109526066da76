"""What each grad_probe level records, and msprobe's CSV header for it (docs/reference/msprobe-tasks.md §9.2).

L0: hash (CRC32 of the gradient cast to float32), max, min, norm, shape.
L1: max, min, norm, shape and the direction (``grad > 0``, packed bits).
L2: L1 plus the fraction of elements in each ``bounds`` interval and the fraction of exact zeros.

msprobe writes the hash at L0 only (its L1/L2 CSVs have no MD5 column); we keep that split because the hash
needs the whole gradient on the host, which the direction (one bit an element, packed on the device) does not.
"""

from typing import List, Sequence

LEVELS = ("L0", "L1", "L2")
DEFAULT_BOUNDS = (-1.0, 0.0, 1.0)


def has_hash(level: str) -> bool:
    return level == "L0"


def has_direction(level: str) -> bool:
    return level in ("L1", "L2")


def has_histogram(level: str) -> bool:
    return level == "L2"


def _fmt_bound(value: float) -> str:
    """Bounds print as the user wrote them: ``1`` for an integral value, ``0.5`` otherwise."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def interval_labels(bounds: Sequence[float]) -> List[str]:
    """Right-closed intervals, as ``torch.bucketize(x, bounds)`` counts them: (-inf, b0], (b0, b1], ..., (bn, inf)."""
    edges = [_fmt_bound(b) for b in bounds]
    labels = [f"(-inf, {edges[0]}]"]
    labels += [f"({lo}, {hi}]" for lo, hi in zip(edges, edges[1:])]
    labels.append(f"({edges[-1]}, inf)")
    return labels


def csv_header(level: str, bounds: Sequence[float] = DEFAULT_BOUNDS) -> List[str]:
    """msprobe's ``grad_summary_{step}.csv`` header for ``level`` (lowercase, as its code writes it)."""
    if level == "L0":
        return ["param_name", "MD5", "max", "min", "norm", "shape"]
    if level == "L1":
        return ["param_name", "max", "min", "norm", "shape"]
    if level == "L2":
        return ["param_name", *interval_labels(bounds), "=0", "max", "min", "norm", "shape"]
    raise ValueError(f"grad_level must be one of {', '.join(LEVELS)}, got {level!r}")

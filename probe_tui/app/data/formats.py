"""How numbers and sizes read in the views."""

import math
from typing import Optional


def number_text(value: float, digits: int = 4) -> str:
    """A metric as people read it: ``3.142``, ``1.2e-05``, ``inf``; ``—`` where there is none (NaN)."""
    if value is None:
        return "—"
    v = float(value)
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return "{:.{}g}".format(v, digits)


def count_text(n: Optional[int]) -> str:
    """``12,345``; ``—`` for None."""
    return "—" if n is None else "{:,}".format(int(n))

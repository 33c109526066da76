"""free_benchmark's consistency metric, the framework-neutral part (docs/reference/msprobe-tasks.md §8.4).

Tensor outputs are compared on their device by the adapter (``free_benchmark_compare.tensor_ratio``: both sides
in the perturbed side's float type, flat chunks, a sign flip is an infinite ratio, the largest ratio over all
chunks). Python numbers are compared here.
"""

import math
from typing import Any, Optional

INF = float("inf")


def scalar_ratio(original: Any, perturbed: Any) -> Optional[float]:
    """Python numbers: ints must be equal, floats give |o|/|p| (a zero gets +1e-8); other types: None."""
    if isinstance(original, bool) or isinstance(perturbed, bool):
        return 1.0 if original == perturbed else INF
    if isinstance(original, int) and isinstance(perturbed, int):
        return 1.0 if original == perturbed else INF
    if isinstance(original, (int, float)) and isinstance(perturbed, (int, float)):
        o, p = float(original), float(perturbed)
        if math.isnan(o) and math.isnan(p):
            return 1.0
        o = o if o != 0 else o + 1e-8
        p = p if p != 0 else p + 1e-8
        if (o < 0) != (p < 0):
            return INF
        r = abs(o) / abs(p)
        return max(r, 1.0 / r)
    return None

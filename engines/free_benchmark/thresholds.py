"""Tolerances, thresholds and the consistency rule of free_benchmark (docs/reference/msprobe-tasks.md §8.3/§8.4), by dtype name.

Dtype names are the framework's (``torch.float16``) or bare (``float16``); ``bf16``-style short names work too.
"""

import math
from typing import Dict, Optional

#: The noise added by add_noise, and the tolerance floor of the comparison, per dtype.
EPSILON: Dict[str, float] = {"bfloat16": 1e-4, "float16": 1e-6, "float32": 1e-8, "float64": 1e-16}

#: Ratio thresholds of the check handler: an output is consistent when 1/thd <= ratio <= thd.
RATIO_THRESHOLD: Dict[str, float] = {"float16": 1.002, "bfloat16": 1.004, "float32": 1.0002}
DEFAULT_THRESHOLD = 1.0002
NO_CHANGE_THRESHOLD = 1.0
#: The backward comparison uses a fixed tolerance floor.
BACKWARD_ABS_TOL = 1e-3
#: Preheat starts every API at this threshold.
PREHEAT_START = 2.05

#: to_cpu comparison thresholds by the original (device) output dtype: rtol, small value, atol, error balance.
TO_CPU_LIMITS: Dict[str, Dict[str, float]] = {
    "float32": {"rtol": 2.0 ** -14, "small": 1.0, "atol": 2.0 ** -14, "eb": 1e-4},
    "float16": {"rtol": 2.0 ** -11, "small": 1.0, "atol": 2.0 ** -11, "eb": 1e-4},
    "bfloat16": {"rtol": 2.0 ** -8, "small": 1.0, "atol": 2.0 ** -8, "eb": 1e-4},
}

SIGN_FLIP = "symbol_flipping"

_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
            "fp64": "float64", "double": "float64"}


def bare(dtype_name: str) -> str:
    """``torch.bfloat16`` / ``mindspore.bfloat16`` / ``bf16`` -> ``bfloat16``."""
    name = str(dtype_name).rsplit(".", 1)[-1].lower()
    return _ALIASES.get(name, name)


def epsilon(dtype_name: str) -> Optional[float]:
    return EPSILON.get(bare(dtype_name))


def forward_abs_tol(perturbed_dtype: str) -> float:
    """sqrt of the perturbed dtype's epsilon: fp32 1e-4, fp16 1e-3, bf16 1e-2 (fp64 1e-8); other dtypes: fp32's."""
    eps = EPSILON.get(bare(perturbed_dtype), EPSILON["float32"])
    return math.sqrt(eps)


def ratio_threshold(output_dtype: str, pert_mode: str) -> float:
    if pert_mode == "no_change":
        return NO_CHANGE_THRESHOLD
    return RATIO_THRESHOLD.get(bare(output_dtype), DEFAULT_THRESHOLD)


def consistent(ratio: float, threshold: float) -> bool:
    """thd >= ratio >= 1/thd (a sign flip is an infinite ratio)."""
    if ratio != ratio:
        return True
    return 1.0 / threshold <= ratio <= threshold


def max_rel(ratio: float) -> str:
    """The CSV's max_rel: ratio - 1, or ``symbol_flipping``."""
    if ratio == float("inf"):
        return SIGN_FLIP
    if ratio != ratio:
        return ""
    return repr(float(ratio) - 1.0)


def chunk_count(nbytes: int) -> int:
    """Number of flat chunks an output of ``nbytes`` is compared in: clamp(2^(floor(log2 MB) - 4), 1, 128)."""
    mb = nbytes / float(1 << 20)
    if mb <= 0:
        return 1
    n = 2.0 ** (math.floor(math.log2(mb)) - 4)
    return int(min(max(n, 1), 128))


def to_cpu_limits(actual_dtype: str) -> Dict[str, float]:
    return TO_CPU_LIMITS.get(bare(actual_dtype), TO_CPU_LIMITS["float32"])

"""Our verdict rules: one documented rule set with configurable thresholds (docs/COMPARE.md, "Verdicts").

Every row gets a verdict code (:data:`VERDICTS`), a bitmask of findings (:data:`FINDINGS`) and the reasons as
text. The rules, worst wins:

error
  target non-finite where the golden is finite (NaN/inf origin or propagation); inf/nan positions differ; shapes
  differ; one side all zeros while the other is not; a scalar argument changed (an eps, a scale); hashes differ
  (md5 mode); a metric beyond its ``error`` limit.
warning
  a metric beyond its ``warning`` limit; dtypes differ within one class (float16 vs float32); golden non-finite
  where the target is finite; requires_grad differs.

Metrics (``compare.thresholds``; higher is worse unless noted). Tensor mode: ``rel_err`` (norm-wise, 1e-3 /
1e-2), ``cosine`` (lower is worse, 0.99 / 0.9), ``max_abs_err`` (1e-3 / 1.0: the absolute-error verdict msprobe
26.2 lacks), ``max_rel_err`` and ``one_thousandth_err_ratio`` (lower is worse; both off by default: element-wise
errors drown in near-zero values). Statistics mode: ``stats_rel_err`` (0.1 / 0.5) on the scale-aware statistic
errors.
unmatched
  no golden row (msprobe 26.2 writes "pass" there), or the golden row has a dtype of another class.
skipped
  rows nothing can be concluded from: APIs whose outputs are uninitialised memory (``empty``, ``empty_like``,
  ...), tensors without data in tensor mode, two devices that differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

PASS, WARNING, ERROR, UNMATCHED, SKIPPED = 0, 1, 2, 3, 4
VERDICTS = ("pass", "warning", "error", "unmatched", "skipped")

FINDINGS = (
    "target non-finite",  # 0
    "non-finite positions differ",  # 1
    "shape differs",  # 2
    "one side all zeros",  # 3
    "scalar argument changed",  # 4
    "hash differs",  # 5
    "dtype differs",  # 6
    "golden non-finite",  # 7
    "requires_grad differs",  # 8
    "no golden row",  # 9
    "dtype class differs",  # 10
    "fuzzy match",  # 11
    "ignored api",  # 12
    "no tensor data",  # 13
    # metric thresholds: the plain bit at warning level, the "(error level)" bit added above the error limit
    "relative error", "relative error (error level)",  # 14, 15
    "cosine", "cosine (error level)",  # 16, 17
    "absolute error", "absolute error (error level)",  # 18, 19
    "element relative error", "element relative error (error level)",  # 20, 21
    "thousandth ratio", "thousandth ratio (error level)",  # 22, 23
)
F = {name: 1 << i for i, name in enumerate(FINDINGS)}
# reason texts where msprobe users know another wording
FINDING_TEXT = {"no golden row": "No bench data matched.", "dtype class differs": "Dtype of NPU and bench tensor "
                "do not match (another dtype class): compared as unmatched.", "fuzzy match":
                "Fuzzy matching data, the comparison accuracy may be affected."}

IGNORED_APIS = {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format", "new_empty_strided",
                "new_empty", "empty_strided"}

# threshold name -> (finding, result column, label in reasons, lower is worse)
METRICS = {
    "rel_err": ("relative error", "rel_err", "rel_err", False),
    "stats_rel_err": ("relative error", "rel_err", "stats rel_err", False),
    "cosine": ("cosine", "cosine", "cosine", True),
    "max_abs_err": ("absolute error", "max_abs_err", "max_abs_err", False),
    "max_rel_err": ("element relative error", "max_rel_err", "max_rel_err", False),
    "one_thousandth_err_ratio": ("thousandth ratio", "one_thousandth", "one thousandth ratio", True),
}
# thresholds judged in each mode
MODE_METRICS = {
    "tensor": ("rel_err", "cosine", "max_abs_err", "max_rel_err", "one_thousandth_err_ratio"),
    "statistics": ("stats_rel_err",),
    "md5": (),
}


@dataclass
class Limits:
    warning: Optional[float]
    error: Optional[float]


class Thresholds:
    """Verdict thresholds per metric (the job's ``compare.thresholds``); None turns a level off."""

    DEFAULTS = {"rel_err": (1e-3, 1e-2), "cosine": (0.99, 0.9), "max_abs_err": (1e-3, 1.0),
                "max_rel_err": (None, None), "one_thousandth_err_ratio": (None, None),
                "stats_rel_err": (0.1, 0.5)}

    def __init__(self, limits: Dict[str, Limits]):
        self.limits = limits

    def __getattr__(self, name: str) -> Limits:
        limits = self.__dict__.get("limits", {})
        if name in limits:
            return limits[name]
        raise AttributeError(name)

    @classmethod
    def default(cls) -> "Thresholds":
        return cls({k: Limits(*v) for k, v in cls.DEFAULTS.items()})

    @classmethod
    def from_config(cls, raw: Any) -> "Thresholds":
        """From the job's ``thresholds`` (a pydantic model, a dict, or None): missing metrics keep defaults."""
        th = cls.default()
        if raw is None:
            return th
        data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
        for metric in cls.DEFAULTS:
            sub = data.get(metric)
            if sub is None:
                continue
            if hasattr(sub, "model_dump"):
                sub = sub.model_dump()
            for level in ("warning", "error"):
                if level in sub:
                    setattr(th.limits[metric], level, None if sub[level] is None else float(sub[level]))
        return th

    def as_dict(self) -> Dict[str, Dict[str, Optional[float]]]:
        return {m: {"warning": lim.warning, "error": lim.error} for m, lim in self.limits.items()}


def _above(values: np.ndarray, limit: Optional[float]) -> np.ndarray:
    if limit is None:
        return np.zeros(values.shape[0], dtype=bool)
    with np.errstate(invalid="ignore"):
        return values > limit


def _below(values: np.ndarray, limit: Optional[float]) -> np.ndarray:
    if limit is None:
        return np.zeros(values.shape[0], dtype=bool)
    with np.errstate(invalid="ignore"):
        return values < limit


def _worse(values: np.ndarray, limit: Optional[float], lower_is_worse: bool) -> np.ndarray:
    return _below(values, limit) if lower_is_worse else _above(values, limit)


def judge(cols: Dict[str, np.ndarray], th: Thresholds,
          mode: str = "tensor") -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Verdict codes, finding bits and reason texts for every row of a result table.

    Needs the columns ``matched``, ``flags`` (findings set while comparing) and the metric columns of ``mode``.
    Reason texts depend on the finding bits only (the values are in their own columns), so they are built once
    per distinct combination.
    """
    n = cols["matched"].shape[0]
    flags = cols["flags"].astype(np.uint32).copy()
    err_bits = (F["target non-finite"] | F["non-finite positions differ"] | F["shape differs"]
                | F["one side all zeros"] | F["scalar argument changed"] | F["hash differs"])
    warn_bits = F["dtype differs"] | F["golden non-finite"] | F["requires_grad differs"]
    for metric in MODE_METRICS.get(mode, ()):
        finding, column, _, lower = METRICS[metric]
        limits = th.limits[metric]
        values = cols[column]
        flags[_worse(values, limits.warning, lower)] |= F[finding]
        flags[_worse(values, limits.error, lower)] |= F[finding] | F[finding + " (error level)"]
        warn_bits |= F[finding]
        err_bits |= F[finding + " (error level)"]
    verdict = np.full(n, PASS, dtype=np.uint8)
    verdict[(flags & warn_bits) != 0] = WARNING
    verdict[(flags & err_bits) != 0] = ERROR
    skipped = (flags & (F["ignored api"] | F["no tensor data"])) != 0
    verdict[skipped & (verdict != ERROR)] = SKIPPED
    verdict[~cols["matched"]] = UNMATCHED
    return verdict, flags, reason_texts(flags, th, mode)


def _fmt(v: Optional[float]) -> str:
    return "{:.4g}".format(v) if v is not None and math.isfinite(v) else str(v)


def reason_text(bits: int, th: Thresholds, mode: str = "tensor") -> str:
    metric_of = {METRICS[m][0]: m for m in MODE_METRICS.get(mode, ())}
    parts = []
    for bit, name in enumerate(FINDINGS):
        if not bits & (1 << bit) or name.endswith("(error level)"):
            continue
        if name in metric_of:
            _, _, label, lower = METRICS[metric_of[name]]
            limits = th.limits[metric_of[name]]
            op = "<" if lower else ">"
            if bits & F[name + " (error level)"]:
                parts.append("error: {} {} {}".format(label, op, _fmt(limits.error)))
            else:
                parts.append("warning: {} {} {}".format(label, op, _fmt(limits.warning)))
        elif name not in _METRIC_FINDINGS:
            parts.append(FINDING_TEXT.get(name, name))
    return "; ".join(parts)


_METRIC_FINDINGS = {v[0] for v in METRICS.values()}


def reason_texts(flags: np.ndarray, th: Thresholds, mode: str = "tensor") -> np.ndarray:
    """Reason text of every row (one text per distinct set of finding bits)."""
    uniq, inverse = np.unique(flags, return_inverse=True)
    texts = np.array([reason_text(int(b), th, mode) for b in uniq.tolist()] or [""], dtype=object)
    return texts[inverse.reshape(-1)] if uniq.size else np.full(flags.shape[0], "", dtype=object)

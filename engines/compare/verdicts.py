"""Our verdict rules: one documented rule set with configurable thresholds (docs/COMPARE.md, "Verdicts").

Every row gets a verdict code (:data:`VERDICTS`), a bitmask of findings (:data:`FINDINGS`) and the reasons as
text. The rules, worst wins:

error
  target non-finite where the golden is finite (NaN/inf origin or propagation); inf/nan positions differ; shapes
  differ; one side all zeros while the other is not; a scalar argument changed (an eps, a scale); hashes differ
  (md5 mode); ``rel_err`` > ``rel_err.error``; ``cosine`` < ``cosine.error``; ``max_abs_err`` >
  ``max_abs_err.error`` (off by default).
warning
  ``rel_err`` > ``rel_err.warning``; ``cosine`` < ``cosine.warning``; ``max_abs_err`` > ``max_abs_err.warning``
  (the absolute-error verdict msprobe 26.2 lacks); dtypes differ within one class (float16 vs float32); golden
  non-finite where the target is finite; requires_grad differs.
unmatched
  no golden row (msprobe 26.2 writes "pass" there), or the golden row has a dtype of another class.
skipped
  rows nothing can be concluded from: APIs whose outputs are uninitialised memory (``empty``, ``empty_like``,
  ...), tensors without data in tensor mode, two devices that differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

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
    "relative error",  # 6 (level in the reason text)
    "cosine",  # 7
    "absolute error",  # 8
    "dtype differs",  # 9
    "golden non-finite",  # 10
    "requires_grad differs",  # 11
    "no golden row",  # 12
    "dtype class differs",  # 13
    "fuzzy match",  # 14
    "ignored api",  # 15
    "no tensor data",  # 16
)
F = {name: 1 << i for i, name in enumerate(FINDINGS)}
# reason texts where msprobe users know another wording
FINDING_TEXT = {"no golden row": "No bench data matched.", "dtype class differs": "Dtype of NPU and bench tensor "
                "do not match (another dtype class): compared as unmatched.", "fuzzy match":
                "Fuzzy matching data, the comparison accuracy may be affected."}

IGNORED_APIS = {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format", "new_empty_strided",
                "new_empty", "empty_strided"}


@dataclass
class Limits:
    warning: Optional[float]
    error: Optional[float]


@dataclass
class Thresholds:
    """Verdict thresholds. ``rel_err`` and ``max_abs_err`` fire above, ``cosine`` below. None = off."""

    rel_err: Limits
    cosine: Limits
    max_abs_err: Limits

    @classmethod
    def default(cls) -> "Thresholds":
        return cls(rel_err=Limits(1e-3, 1e-2), cosine=Limits(0.9999, 0.99), max_abs_err=Limits(1.0, None))

    @classmethod
    def from_config(cls, raw: Any) -> "Thresholds":
        """From the job's ``thresholds`` (a pydantic model, a dict, or None): missing values keep defaults."""
        th = cls.default()
        if raw is None:
            return th
        data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
        for metric in ("rel_err", "cosine", "max_abs_err"):
            sub = data.get(metric)
            if sub is None:
                continue
            if hasattr(sub, "model_dump"):
                sub = sub.model_dump()
            limits = getattr(th, metric)
            for level in ("warning", "error"):
                if level in sub:
                    setattr(limits, level, None if sub[level] is None else float(sub[level]))
        return th

    def as_dict(self) -> Dict[str, Dict[str, Optional[float]]]:
        return {m: {"warning": getattr(self, m).warning, "error": getattr(self, m).error}
                for m in ("rel_err", "cosine", "max_abs_err")}


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


def judge(cols: Dict[str, np.ndarray], th: Thresholds):
    """Verdict codes, finding bits and reason texts for every row of a result table.

    Needs the columns ``matched``, ``status``, ``flags`` (findings set while comparing), ``rel_err``,
    ``cosine``, ``max_abs_err``.
    """
    n = cols["matched"].shape[0]
    flags = cols["flags"].astype(np.uint32).copy()
    rel, cos, mabs = cols["rel_err"], cols["cosine"], cols["max_abs_err"]
    flags[_above(rel, th.rel_err.warning)] |= F["relative error"]
    flags[_below(cos, th.cosine.warning)] |= F["cosine"]
    flags[_above(mabs, th.max_abs_err.warning)] |= F["absolute error"]
    err_bits = (F["target non-finite"] | F["non-finite positions differ"] | F["shape differs"]
                | F["one side all zeros"] | F["scalar argument changed"] | F["hash differs"])
    warn_bits = (F["dtype differs"] | F["golden non-finite"] | F["requires_grad differs"]
                 | F["relative error"] | F["cosine"] | F["absolute error"])
    verdict = np.full(n, PASS, dtype=np.uint8)
    verdict[(flags & warn_bits) != 0] = WARNING
    metric_error = _above(rel, th.rel_err.error) | _below(cos, th.cosine.error) | _above(mabs, th.max_abs_err.error)
    verdict[((flags & err_bits) != 0) | metric_error] = ERROR
    skipped = (flags & (F["ignored api"] | F["no tensor data"])) != 0
    verdict[skipped & (verdict != ERROR)] = SKIPPED
    verdict[~cols["matched"]] = UNMATCHED
    reasons = _reasons(flags, verdict, rel, cos, mabs, th)
    return verdict, flags, reasons


def _fmt(v: float) -> str:
    return "{:.4g}".format(v) if math.isfinite(v) else str(v)


def _reasons(flags, verdict, rel, cos, mabs, th: Thresholds) -> np.ndarray:
    out = np.full(flags.shape[0], "", dtype=object)
    for i in np.flatnonzero(flags):
        f = int(flags[i])
        parts = []
        for bit, name in enumerate(FINDINGS):
            if not f & (1 << bit):
                continue
            if name == "relative error":
                level = "error" if th.rel_err.error is not None and rel[i] > th.rel_err.error else "warning"
                parts.append("{}: rel_err {} > {}".format(level, _fmt(rel[i]), _fmt(
                    th.rel_err.error if level == "error" else th.rel_err.warning)))
            elif name == "cosine":
                level = "error" if th.cosine.error is not None and cos[i] < th.cosine.error else "warning"
                parts.append("{}: cosine {} < {}".format(level, _fmt(cos[i]), _fmt(
                    th.cosine.error if level == "error" else th.cosine.warning)))
            elif name == "absolute error":
                level = ("error" if th.max_abs_err.error is not None and mabs[i] > th.max_abs_err.error
                         else "warning")
                parts.append("{}: max_abs_err {} > {}".format(level, _fmt(mabs[i]), _fmt(
                    th.max_abs_err.error if level == "error" else th.max_abs_err.warning)))
            else:
                parts.append(FINDING_TEXT.get(name, name))
        out[i] = "; ".join(parts)
    return out

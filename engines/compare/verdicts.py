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
    "relative error (error level)",  # 17
    "cosine (error level)",  # 18
    "absolute error (error level)",  # 19
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

    Needs the columns ``matched``, ``flags`` (findings set while comparing), ``rel_err``, ``cosine``,
    ``max_abs_err``. Reason texts depend on the finding bits only (the values are in their own columns), so they
    are built once per distinct combination.
    """
    n = cols["matched"].shape[0]
    flags = cols["flags"].astype(np.uint32).copy()
    rel, cos, mabs = cols["rel_err"], cols["cosine"], cols["max_abs_err"]
    for metric, values, test in (("relative error", rel, _above), ("cosine", cos, _below),
                                 ("absolute error", mabs, _above)):
        limits = getattr(th, _METRIC_FIELD[metric])
        flags[test(values, limits.warning)] |= F[metric]
        flags[test(values, limits.error)] |= F[metric] | F[metric + " (error level)"]
    err_bits = (F["target non-finite"] | F["non-finite positions differ"] | F["shape differs"]
                | F["one side all zeros"] | F["scalar argument changed"] | F["hash differs"]
                | F["relative error (error level)"] | F["cosine (error level)"] | F["absolute error (error level)"])
    warn_bits = (F["dtype differs"] | F["golden non-finite"] | F["requires_grad differs"]
                 | F["relative error"] | F["cosine"] | F["absolute error"])
    verdict = np.full(n, PASS, dtype=np.uint8)
    verdict[(flags & warn_bits) != 0] = WARNING
    verdict[(flags & err_bits) != 0] = ERROR
    skipped = (flags & (F["ignored api"] | F["no tensor data"])) != 0
    verdict[skipped & (verdict != ERROR)] = SKIPPED
    verdict[~cols["matched"]] = UNMATCHED
    return verdict, flags, reason_texts(flags, th)


_METRIC_FIELD = {"relative error": "rel_err", "cosine": "cosine", "absolute error": "max_abs_err"}
_METRIC_TEXT = {"relative error": ("rel_err", ">"), "cosine": ("cosine", "<"), "absolute error": ("max_abs_err", ">")}


def _fmt(v: Optional[float]) -> str:
    return "{:.4g}".format(v) if v is not None and math.isfinite(v) else str(v)


def reason_text(bits: int, th: Thresholds) -> str:
    parts = []
    for bit, name in enumerate(FINDINGS):
        if not bits & (1 << bit) or name.endswith("(error level)"):
            continue
        if name in _METRIC_TEXT:
            label, op = _METRIC_TEXT[name]
            limits = getattr(th, _METRIC_FIELD[name])
            if bits & F[name + " (error level)"]:
                parts.append("error: {} {} {}".format(label, op, _fmt(limits.error)))
            else:
                parts.append("warning: {} {} {}".format(label, op, _fmt(limits.warning)))
        else:
            parts.append(FINDING_TEXT.get(name, name))
    return "; ".join(parts)


def reason_texts(flags: np.ndarray, th: Thresholds) -> np.ndarray:
    """Reason text of every row (one text per distinct set of finding bits)."""
    uniq, inverse = np.unique(flags, return_inverse=True)
    texts = np.array([reason_text(int(b), th) for b in uniq.tolist()] or [""], dtype=object)
    return texts[inverse.reshape(-1)] if uniq.size else np.full(flags.shape[0], "", dtype=object)

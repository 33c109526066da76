"""Alert rules (docs/reference/msprobe-tasks.md §10.5, fixed where msprobe falls short), evaluated on a whole step at once with numpy.

- ``AnomalyTurbulence(threshold, direction)``: the history of a series is an EMA of ``|value|`` (beta 0.99,
  started at the first value, compared *before* it is updated). A value is anomalous when
  ``|v| > avg * (1 + threshold)`` (``up``, the default and msprobe's behaviour), ``|v| < avg * (1 - threshold)``
  (``down``), or either (``both``: msprobe's docs promise both directions, its code checks only up). Judged on
  ``norm``, ``mean`` and single-value series (the loss); the first sample of a series never alerts.
- ``AnomalyNan(threshold=None, include_inf=True)``: NaN and ±inf values (msprobe misses inf), a positive
  ``nans``/``infs`` count, and, with a threshold, ``|v| > threshold``. Judged on every metric.

Rules are evaluated in the configured order; the first that fires for a value wins. Non-finite values never
enter the history, so one NaN step does not blind the turbulence rule for the rest of the run; a value the
turbulence rule flagged enters it clipped to the edge of the band (``avg * (1 ± threshold)``), so that one spike
does not make the next normal steps look like a drop, while a lasting change of level is still learnt.
"""

from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines.monitor.metrics import TURBULENCE_METRICS

BETA = 0.99
RULE_NAMES = ("AnomalyTurbulence", "AnomalyNan")
DIRECTIONS = ("both", "up", "down")


@dataclass
class Alert:
    step: int
    series: int
    tag: str
    name: str
    module: str
    metric: str
    value: float
    baseline: float  # the history mean the value was compared with (NaN for the NaN rule)
    rule: str
    kind: str  # "up", "down", "nan", "inf", "count", "threshold"

    @property
    def message(self) -> str:
        where = f"('{self.name}', '{self.tag} {self.metric}')"
        return (
            f"Rule {self.rule} reports anomaly signal ({self.kind}) in {where} at step {self.step}, "
            f"current value {self.value:.6g}, history mean {self.baseline:.6g}."
        )

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["message"] = self.message
        return out


@dataclass
class RuleSpec:
    name: str
    threshold: Optional[float] = None
    direction: str = "up"
    include_inf: bool = True

    @classmethod
    def from_config(cls, rule: Any) -> "RuleSpec":
        """From msprobe's ``{"rule_name": ..., "args": {"threshold": ...}}`` (or a pydantic model of it)."""
        if hasattr(rule, "model_dump"):
            rule = rule.model_dump()
        name = rule.get("rule_name") or rule.get("name")
        if name not in RULE_NAMES:
            raise ValueError(f"alert.rules: unknown rule_name {name!r} (one of {', '.join(RULE_NAMES)})")
        args = {k: v for k, v in dict(rule.get("args") or {}).items() if v is not None}
        threshold = args.get("threshold")
        direction = str(args.get("direction", "up"))
        if direction not in DIRECTIONS:
            raise ValueError(f"alert.rules.args.direction: {direction!r} is not one of {', '.join(DIRECTIONS)}")
        if name == "AnomalyTurbulence" and threshold is None:
            raise ValueError("alert.rules: AnomalyTurbulence needs args.threshold")
        return cls(name, None if threshold is None else float(threshold), direction,
                   bool(args.get("include_inf", True)))


class AlertEngine:
    """Keeps the per-series history and judges each step's values."""

    def __init__(self, rules: Sequence[RuleSpec]):
        self.rules = list(rules)
        self._ema = np.zeros(0, dtype=np.float64)
        self._seen = np.zeros(0, dtype=bool)

    def _grow(self, size: int) -> None:
        if size > self._ema.size:
            extra = max(size - self._ema.size, self._ema.size)
            self._ema = np.concatenate([self._ema, np.zeros(extra)])
            self._seen = np.concatenate([self._seen, np.zeros(extra, dtype=bool)])

    def check(self, step: int, ids: np.ndarray, values: np.ndarray,
              describe: Callable[[int], Tuple[str, str, str, str]]) -> List[Alert]:
        """``describe(series_id) -> (tag, name, module, metric)``. Returns alerts in series order."""
        ids = np.asarray(ids, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if ids.size == 0:
            return []
        self._grow(int(ids.max()) + 1)
        metrics = [describe(int(i))[3] for i in ids]
        magnitude = np.abs(values)
        finite = np.isfinite(values)
        seen = self._seen[ids]
        baseline = np.where(seen, self._ema[ids], np.nan)
        fired = np.zeros(ids.size, dtype=bool)
        clipped = magnitude.copy()
        found = []
        for rule in self.rules:
            if rule.name == "AnomalyNan":
                counted = ("nans", "infs") if rule.include_inf else ("nans",)
                counts = np.array([m in counted for m in metrics]) & (values > 0)
                hit = np.isnan(values) | counts
                if rule.include_inf:
                    hit |= np.isinf(values)
                if rule.threshold is not None:
                    hit |= finite & (magnitude > rule.threshold)
                kinds = np.where(np.isnan(values), "nan", np.where(np.isinf(values), "inf", np.where(counts, "count", "threshold")))
            else:
                threshold = rule.threshold if rule.threshold is not None else 0.0  # from_config requires one
                judged = np.array([m in TURBULENCE_METRICS for m in metrics]) & seen & finite
                up = judged & (magnitude > baseline * (1.0 + threshold))
                down = judged & (magnitude < baseline * (1.0 - threshold))
                hit = {"up": up, "down": down, "both": up | down}[rule.direction]
                kinds = np.where(up, "up", "down")
                band_hi, band_lo = baseline * (1.0 + threshold), baseline * max(0.0, 1.0 - threshold)
                clipped = np.where(hit & up, band_hi, np.where(hit & down, band_lo, clipped))
            new = hit & ~fired
            fired |= hit
            for i in np.flatnonzero(new):
                found.append((i, rule.name, str(kinds[i])))
        # History update: finite values only; the first value starts the EMA.
        update = finite
        first = update & ~seen
        later = update & seen
        self._ema[ids[first]] = magnitude[first]
        self._ema[ids[later]] = BETA * self._ema[ids[later]] + (1.0 - BETA) * clipped[later]
        self._seen[ids[update]] = True
        alerts = []
        for i, rule_name, kind in sorted(found, key=lambda item: item[0]):
            tag, name, module, metric = describe(int(ids[i]))
            alerts.append(
                Alert(step, int(ids[i]), tag, name, module, metric, float(values[i]), float(baseline[i]), rule_name, kind)
            )
        return alerts

"""The live monitor's alerts, one group per rule and module (and rank): a run can raise thousands of alerts, most
of them the same module tripping the same rule step after step. A group keeps its first step, its count, its
worst alert (the one farthest from its baseline; NaN/inf beat any finite value) and the metrics that alerted.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

GroupKey = Tuple[str, str, str]
"""(rank, rule, module)."""

SORTS = ("first step", "count", "worst")


def severity(alert: dict) -> float:
    """How far the alert's value is from its baseline (a ratio, in either direction); inf when not finite."""
    value, baseline = alert.get("value"), alert.get("baseline")
    if alert.get("kind") in ("nan", "inf") or value is None or not math.isfinite(float(value)):
        return math.inf
    if baseline is None or not math.isfinite(float(baseline)) or float(baseline) == 0.0 or float(value) == 0.0:
        return abs(float(value))
    ratio = abs(float(value) / float(baseline))
    return ratio if ratio >= 1.0 else (1.0 / ratio if ratio else math.inf)


def module_of(alert: dict) -> str:
    return str(alert.get("module") or alert.get("name") or "")


@dataclass
class AlertGroup:
    key: GroupKey
    first: int
    """Index (in the screen's list of every alert) of the group's first alert."""
    first_step: int
    worst: int
    worst_severity: float
    count: int = 0
    metrics: List[str] = field(default_factory=list)


class AlertGroups:
    """Groups alerts as they arrive (:meth:`add`); :meth:`ordered` lists the groups by a sort of :data:`SORTS`."""

    def __init__(self) -> None:
        self.groups: Dict[GroupKey, AlertGroup] = {}
        self.alerts: List[dict] = []

    def add(self, alerts: List[dict]) -> bool:
        """Take new alerts; True when any arrived."""
        for alert in alerts:
            n = len(self.alerts)
            self.alerts.append(alert)
            key = (str(alert.get("rank", "")), str(alert.get("rule") or alert.get("kind") or ""), module_of(alert))
            step = int(alert.get("step", 0))
            worse = severity(alert)
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = AlertGroup(key, n, step, n, worse)
            elif step < group.first_step:
                group.first, group.first_step = n, step
            if worse > group.worst_severity:
                group.worst, group.worst_severity = n, worse
            group.count += 1
            series = "{} {}".format(alert.get("tag", ""), alert.get("metric", "")).strip()
            if series not in group.metrics:
                group.metrics.append(series)
        return bool(alerts)

    def ordered(self, sort: str = SORTS[0]) -> List[AlertGroup]:
        groups = list(self.groups.values())
        if sort == "count":
            groups.sort(key=lambda g: (-g.count, g.first_step, g.key))
        elif sort == "worst":
            groups.sort(key=lambda g: (-g.worst_severity, g.first_step, g.key))
        else:
            groups.sort(key=lambda g: (g.first_step, g.key))
        return groups

    def find(self, key: str) -> Optional[AlertGroup]:
        """The group whose row key (:func:`row_key`) is ``key``."""
        parts = key.split("\x1f")
        return self.groups.get((parts[0], parts[1], parts[2])) if len(parts) == 3 else None


def row_key(group: AlertGroup) -> str:
    return "\x1f".join(group.key)

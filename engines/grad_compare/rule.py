"""The 0.97 / 0.03 rule, applied (msprobe documents it and never implements it; docs/reference/msprobe-tasks.md §9.3).

A parameter has a problem at the first compared step if its similarity is below ``threshold`` (0.97), and at a
later step if its similarity dropped by more than ``drop`` (0.03) from the previous compared step. The verdict
names the first step, and at that step the first parameter in model order, that breaks the rule.
"""

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from engines.grad_compare.similarity import SimilarityTable


@dataclass
class Violation:
    step: int
    param: str
    similarity: float
    previous: Optional[float]
    reason: str  # "below_threshold" or "drop"

    def describe(self, threshold: float, drop: float) -> str:
        if self.reason == "below_threshold":
            return f"{self.similarity:.4f} < {threshold} at its first step"
        previous = self.previous if self.previous is not None else float("nan")  # set for every "drop"
        return f"dropped {previous - self.similarity:.4f} > {drop} (from {previous:.4f})"


@dataclass
class RuleVerdict:
    threshold: float
    drop: float
    violations: List[Violation]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first(self) -> Optional[Violation]:
        return self.violations[0] if self.violations else None


def apply_rule(table: SimilarityTable, threshold: float = 0.97, drop: float = 0.03) -> RuleVerdict:
    """Every violation, ordered by step, then by parameter order (the first one is the verdict).

    A parameter's "first step" is the first step at which it was compared, and its "previous step" the last
    step before at which it was compared (a parameter missing from some steps is still judged).
    """
    found = []
    values = table.values
    for p, param in enumerate(table.params):
        previous = None
        for s, step in enumerate(table.steps):
            current = values[p, s]
            if np.isnan(current):
                continue
            if previous is None:
                if current < threshold:
                    found.append((s, p, Violation(step, param, float(current), None, "below_threshold")))
            elif previous - current > drop:
                found.append((s, p, Violation(step, param, float(current), float(previous), "drop")))
            previous = float(current)
    found.sort(key=lambda item: (item[0], item[1]))
    return RuleVerdict(threshold, drop, [v for _, _, v in found])

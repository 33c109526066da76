"""Which steps the monitor collects (docs/reference/msprobe-tasks.md §10.6): ``start_step``, ``step_interval``, ``collect_times`` and
``module_ranks``. A config reload (dynamic mode) restarts the count: collection resumes at the next step if
``start_step`` is already behind, and ``collect_times`` counts from zero again."""

from dataclasses import dataclass
from typing import Any, Optional, Sequence


@dataclass
class Schedule:
    start_step: int = 0
    step_interval: int = 1
    collect_times: int = 100_000_000
    ranks: Optional[Sequence[int]] = None
    collected: int = 0

    @classmethod
    def from_section(cls, section: Any, *, not_before: int = 0) -> "Schedule":
        start = max(int(getattr(section, "start_step", 0) or 0), int(not_before))
        ranks = list(getattr(section, "module_ranks", None) or []) or None
        return cls(start, max(1, int(getattr(section, "step_interval", 1) or 1)),
                   int(getattr(section, "collect_times", 100_000_000) or 100_000_000), ranks)

    def rank_selected(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def wants(self, step: int, rank: int) -> bool:
        return (
            self.rank_selected(rank)
            and step >= self.start_step
            and (step - self.start_step) % self.step_interval == 0
            and self.collected < self.collect_times
        )

    @property
    def finished(self) -> bool:
        return self.collected >= self.collect_times

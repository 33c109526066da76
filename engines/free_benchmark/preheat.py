"""Preheat (docs/reference/msprobe-tasks.md §8.6): learn a ratio threshold per API and output dtype before checking.

Step 0 counts the calls of each API (its name without ``.N.forward``). Steps 1 .. preheat_step-1 sample
``min(ceil(calls / preheat_step), max_sample)`` calls of each API, rotating through them (call number
``(preheat_step * (i - 1) + step) % calls``, 0 meaning the last), and record for each sample the perturbation
ratio and whether the call agrees with a CPU re-run. After each preheat step the threshold of every API and dtype
that got samples moves, starting from 2.05:

- consistent and inconsistent samples, every inconsistent ratio above every consistent one: the threshold drops
  to the smallest inconsistent ratio (if lower) and is frozen;
- only inconsistent samples: the same;
- only consistent samples: the distance to 1 doubles when a ratio passed the threshold, else it halves;
- it is never below the dtype's default threshold.

From step ``preheat_step`` on, calls are checked against the learned threshold (the default one for an API or
dtype that got no sample).
"""

import math
from typing import Callable, Dict, List, Optional, Set, Tuple

from engines.free_benchmark.thresholds import PREHEAT_START

Key = Tuple[str, str]  # (api, dtype)


def pure_name(name: str) -> str:
    """``Torch.matmul.3.forward`` -> ``Torch.matmul``."""
    parts = name.split(".")
    if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
        return ".".join(parts[:-2])
    return name


class Preheat:
    def __init__(self, preheat_step: int, max_sample: int) -> None:
        self.preheat_step = int(preheat_step)
        self.max_sample = int(max_sample)
        self.calls: Dict[str, int] = {}
        self.thresholds: Dict[Key, float] = {}
        self.frozen: Set[Key] = set()
        self.step_samples: Dict[Key, List[Tuple[float, bool]]] = {}
        self.sampled = 0

    def in_preheat(self, step: int) -> bool:
        return step < self.preheat_step

    def count(self, step: int, api: str) -> None:
        if step == 0:
            self.calls[api] = self.calls.get(api, 0) + 1

    def sample_numbers(self, step: int, api: str) -> Set[int]:
        """1-based call numbers of ``api`` sampled at ``step`` (empty outside steps 1 .. preheat_step-1)."""
        total = self.calls.get(api, 0)
        if step <= 0 or step >= self.preheat_step or total <= 0:
            return set()
        n = min(math.ceil(total / self.preheat_step), self.max_sample)
        out = set()
        for i in range(1, n + 1):
            k = (self.preheat_step * (i - 1) + step) % total
            out.add(k if k else total)
        return out

    def add(self, api: str, dtype: str, ratio: float, consistent: bool) -> None:
        self.step_samples.setdefault((api, dtype), []).append((float(ratio), bool(consistent)))
        self.sampled += 1

    def end_step(self, default_threshold: Callable[[str], float]) -> None:
        """Move the thresholds with this step's samples; ``default_threshold(dtype)`` is the floor."""
        for key, samples in self.step_samples.items():
            if key in self.frozen:
                continue
            thd = self.thresholds.get(key, PREHEAT_START)
            con = [r for r, ok in samples if ok]
            incon = [r for r, ok in samples if not ok]
            if incon and (not con or min(incon) > max(con)):
                thd = min(min(incon), thd)
                self.frozen.add(key)
            elif con and not incon:
                thd = 1 + (thd - 1) * 2 if max(con) > thd else 1 + (thd - 1) / 2
            self.thresholds[key] = max(thd, default_threshold(key[1]))
        self.step_samples = {}

    def threshold(self, api: str, dtype: str) -> Optional[float]:
        return self.thresholds.get((api, dtype))

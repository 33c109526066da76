"""Shared by the overflow_check and free_benchmark benchmarks: the demo's training step, optionally under
autocast, and interleaved timing of an instrumented arm against the bare model (DECISIONS 21)."""

import statistics
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from engines.adapters.torch.demo import AUTOCAST_DTYPES, build_model
from engines.demo.data import batches
from engines.demo.knobs import resolve_knobs


class Workload:
    """The demo's model, AdamW and one batch; ``step()`` is zero_grad + forward + loss + backward + step."""

    def __init__(self, preset: str, dtype: str = "fp32", faults: Optional[dict] = None) -> None:
        self.knobs = resolve_knobs({"preset": preset, "steps": 1, "dtype": dtype, "faults": faults or {}})
        torch.manual_seed(self.knobs.seed)
        self.model = build_model(self.knobs)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.knobs.lr)
        self.tokens, self.targets = [(torch.from_numpy(x), torch.from_numpy(y))
                                     for x, y in batches(self.knobs)][0]
        self.autocast = AUTOCAST_DTYPES.get(dtype)

    def step(self) -> float:
        self.opt.zero_grad()
        with torch.autocast("cpu", dtype=self.autocast or torch.bfloat16, enabled=self.autocast is not None):
            logits = self.model(self.tokens)
            loss = F.cross_entropy(logits.view(-1, self.knobs.vocab), self.targets.view(-1))
        loss.backward()
        self.opt.step()
        return float(loss.detach())


def peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def interleaved(work: Workload, instrumented: Callable[[], None], steps: int, warmup: int) -> Dict[str, float]:
    """Median wall and CPU-time ratios of ``instrumented`` against ``work.step``, alternating step by step."""
    base_w: List[float] = []
    base_c: List[float] = []
    arm_w: List[float] = []
    arm_c: List[float] = []
    for i in range(warmup + steps):
        for fn, w, c in ((work.step, base_w, base_c), (instrumented, arm_w, arm_c)):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            if i >= warmup:
                w.append(time.perf_counter() - w0)
                c.append(time.process_time() - c0)
    return {"ratio": statistics.median(arm_w) / statistics.median(base_w),
            "cpu_ratio": statistics.median(arm_c) / statistics.median(base_c),
            "base_s": statistics.median(base_w), "arm_s": statistics.median(arm_w)}

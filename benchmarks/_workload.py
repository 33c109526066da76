"""Shared by the benchmarks: interleaved timing of an instrumented arm against the bare model (docs/decisions/0021-reference-workload.md), the
figures of an arm over rounds, peak host memory, and the PyTorch demo's training step (optionally under
autocast). Framework-free at import: the MindSpore benchmark uses the timing without importing torch."""

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple


class Workload:
    """The PyTorch demo's model, AdamW and one batch; ``step()`` is zero_grad + forward + loss + backward +
    step (under autocast when ``dtype`` asks for it)."""

    def __init__(self, preset: str, dtype: str = "fp32", faults: Optional[dict] = None) -> None:
        import torch
        import torch.nn.functional as F

        from engines.adapters.torch.demo import AUTOCAST_DTYPES, build_model
        from engines.demo.data import batches
        from engines.demo.knobs import resolve_knobs

        self._torch, self._F = torch, F
        self.knobs = resolve_knobs({"preset": preset, "steps": 1, "dtype": dtype, "faults": faults or {}})
        torch.manual_seed(self.knobs.seed)
        self.model = build_model(self.knobs)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.knobs.lr)
        self.tokens, self.targets = [(torch.from_numpy(x), torch.from_numpy(y))
                                     for x, y in batches(self.knobs)][0]
        self.autocast = AUTOCAST_DTYPES.get(dtype)

    def step(self) -> float:
        torch, F = self._torch, self._F
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


def timed(fn: Callable[[], Any]) -> Tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def session_step(session: Any, work: Any) -> Callable[[], None]:
    """One training step of ``work`` under a step-driven session (start, step, step_end)."""

    def step() -> None:
        session.start(work.model)
        work.step()
        session.step_end()

    return step


# The statistics arms both capture benchmarks measure (options of CaptureOptions; None: no capture).
STATISTICS_ARMS: Dict[str, Optional[Dict[str, Any]]] = {
    "disabled": None,
    "statistics L0": dict(level="L0"),
    "statistics L1": dict(level="L1"),
    "statistics mix": dict(level="mix"),
    "statistics L1 hash": dict(level="L1", summary_mode="hash"),
}


def each_arm(arms: Any, run: Callable[[str, Path], Any], report: Callable[[str, Any], None],
             prefix: str) -> Dict[str, Any]:
    """``run(arm, root)`` for each arm in turn, each result reported as it comes; the arms' dumps go under one
    temporary folder, removed at the end."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        out = {}
        for arm in arms:
            out[arm] = run(arm, root)
            report(arm, out[arm])
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def interleaved(work: Any, instrumented: Callable[[], Any], steps: int, warmup: int) -> Dict[str, float]:
    """Median wall and CPU-time ratios of ``instrumented`` against ``work.step``, alternating step by step."""
    base_w: List[float] = []
    base_c: List[float] = []
    arm_w: List[float] = []
    arm_c: List[float] = []
    for i in range(warmup + steps):
        for fn, w, c in ((work.step, base_w, base_c), (instrumented, arm_w, arm_c)):
            wall, cpu = timed(fn)
            if i >= warmup:
                w.append(wall)
                c.append(cpu)
    return {"ratio": statistics.median(arm_w) / statistics.median(base_w),
            "cpu_ratio": statistics.median(arm_c) / statistics.median(base_c),
            "base_s": statistics.median(base_w), "arm_s": statistics.median(arm_w)}


# open_round(r) -> (one instrumented step, what ends the round, the round's CaptureSummary, its dump folder)
OpenRound = Callable[[int], Tuple[Callable[[], Any], Callable[[], Any], Any, Path]]


def arm_rounds(work: Any, open_round: OpenRound, rounds: int, steps: int, warmup: int) -> Dict[str, float]:
    """An arm over ``rounds`` rounds of interleaved steps: the median ratio and its spread, the CPU-time ratio,
    records, bytes and files per step, and the added time per captured record (seconds)."""
    ratios: List[float] = []
    cpu_ratios: List[float] = []
    per_record: List[float] = []
    records = nbytes = files = measured = 0
    for r in range(rounds):
        captured, end, summary, folder = open_round(r)
        got = interleaved(work, captured, steps, warmup)
        end()
        n = warmup + steps
        ratios.append(got["ratio"])
        cpu_ratios.append(got["cpu_ratio"])
        records += summary.records
        nbytes += summary.bytes
        measured += n
        if folder.exists():
            files += sum(1 for p in folder.rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)
        if summary.records:
            per_record.append((got["arm_s"] - got["base_s"]) / (summary.records / n))
    return {
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "cpu_ratio": statistics.median(cpu_ratios),
        "records_per_step": records / measured,
        "bytes_per_step": nbytes / measured,
        "files_per_step": files / measured,
        "s_per_record": statistics.median(per_record) if per_record else 0.0,
    }

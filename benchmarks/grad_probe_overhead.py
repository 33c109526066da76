"""Overhead of grad_probe on the demo's reference workload (docs/decisions/0021-reference-workload.md), per level.

Arms: no tool, L0 (hash, max, min, norm), L1 (+ packed directions), L2 (+ bounds histogram and zero fraction),
each writing its HDF5 store as the engine does. Same harness as ``monitor_overhead.py``: one process per arm and
round, arms interleaved, torch on one thread; median step time, ratio and spread, CPU-time ratios, peak memory.
msprobe 8.3.3 on this workload: L1 1.34x, L2 1.56x (docs/reference/msprobe-baselines.md).

    python benchmarks/grad_probe_overhead.py [--rounds 3] [--steps 8] [--preset default]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import monitor_overhead as harness  # noqa: E402

ARMS = {"baseline": None, "L0": "L0", "L1": "L1", "L2": "L2"}


def instrument(arm: str, workdir: Path):
    level = ARMS[arm]
    if level is None:
        return lambda: None
    from engines.adapters.torch.grad_probe import GradProbeHook
    from engines.grad_probe.writer import GradStoreWriter

    writer = GradStoreWriter(workdir / "rank0", level=level, bounds=[-1e-3, 0, 1e-3])
    hook = GradProbeHook(writer.write, level=level, bounds=[-1e-3, 0, 1e-3]).install()

    def remove():
        hook.remove()
        writer.close()

    return remove


if __name__ == "__main__":
    harness.ARMS = ARMS
    harness.instrument = instrument
    harness.main(arms=ARMS, script=Path(__file__).resolve())

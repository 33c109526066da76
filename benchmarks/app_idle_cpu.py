"""Does the app answer every key at once, and cost nothing when idle?

    python benchmarks/app_idle_cpu.py [--idle 10] [--steps 2000]

Writes a finished monitor run (``--steps`` steps of 40 series, turbulence alerts on one module) and a compare
result of two small dumps into a temporary folder, opens the app headless (``App.run_test``, 120x40 and 80x24) and
reports:

- key answers: for each view (home, live monitor, compare browser, a table search), the keys a user presses there,
  each timed from the press to the screen being idle again (median and worst, ms); the target is < 100 ms; the
  floor is the same for a key bound to nothing (what the test pilot itself costs);
- idle CPU: the process's CPU time over ``--idle`` seconds of nothing pressed, on the home screen and on the
  finished run's monitor (which stops polling once the writer has finished); the target is < 1 %.

Run it at a load of about 1 (``uptime``); figures are printed, nothing is asserted.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_monitor_run(folder: Path, steps: int) -> Path:
    from engines.monitor.alerts import RuleSpec
    from engines.monitor.writer import MetricsWriter

    keys = [("train", "loss", "value")] + [("grad_reduced", "model.layers.{}.mlp.fc{}.weight".format(n, k), "norm")
                                          for n in range(13) for k in (1, 2, 3)]
    writer = MetricsWriter(folder / "rank0", rules=[RuleSpec("AnomalyTurbulence", 1.0, "up")])
    rng = np.random.default_rng(0)
    for step in range(steps):
        values = 1.0 + 0.01 * rng.standard_normal(len(keys))
        values[0] = 7.0 - step * 1e-3
        if step % 97 == 40:  # a recurring spike: many alerts, one group
            values[5] *= 100.0
        writer.write_step(step, keys, values)
    writer.close()
    return folder


def write_compare_result(root: Path) -> Path:
    import json

    from engines.compare.engine import run_compare
    from engines.store import DumpWriter

    meta = {"rank": 0, "world_size": 1, "framework": "pytorch"}
    for side, scale in (("target", 1.001), ("golden", 1.0)):
        names = ["Functional.linear.{}.forward".format(n) for n in range(400)]
        with DumpWriter(root / side / "rank0", meta=meta) as w:
            rows = w.add_records(step=0, name=names, kind=0, direction=0, parent="",
                                 args=[json.dumps({"args": [], "kwargs": {}})] * len(names))
            base = np.arange(1, len(names) + 1, dtype=np.float64)
            w.add_tensors(step=0, valid=15, record=list(rows), slot=["output.0"] * len(names),
                          dtype=["torch.float32"] * len(names), shape=[(4, 8)] * len(names), max=base * scale,
                          min=-base, mean=base / 10, norm=base * 2)
            w.commit_step(0)
    out = root / "result"
    run_compare({"task": "compare", "compare": {"target_path": str(root / "target" / "rank0"),
                                                "golden_path": str(root / "golden" / "rank0"),
                                                "mode": "statistics", "formats": ["hdf5"], "output_path": str(out)}},
                None)
    return out


async def until(pilot, predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("the app did not get there in {:.0f} s".format(timeout))
        await pilot.pause(0.02)


async def time_keys(pilot, keys: Sequence[str]) -> List[float]:
    """ms from each key press to the app being idle again (its messages handled, workers done)."""
    times = []
    for key in keys:
        start = time.perf_counter()
        await pilot.press(key)
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


async def idle_cpu(pilot, seconds: float) -> float:
    """% of one core the process used over ``seconds`` of nothing pressed."""
    await pilot.pause(0.5)
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    return 100.0 * (time.process_time() - cpu) / (time.monotonic() - wall)


def report(name: str, times: List[float]) -> None:
    print("  {:<28} {:>3} keys  median {:6.1f} ms  worst {:6.1f} ms".format(name, len(times),
                                                                           statistics.median(times), max(times)))


async def measure(root: Path, monitor: Path, compare: Path, size, idle_s: float) -> Dict[str, float]:
    from probe_tui.app.app import ProbeApp
    from probe_tui.app.screens.compare import CompareScreen
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.monitor import MonitorScreen

    app = ProbeApp(root, root_label="~/bench")
    figures: Dict[str, float] = {}
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        figures["home idle %"] = await idle_cpu(pilot, idle_s)
        report("floor (an unbound key)", await time_keys(pilot, ["f12"] * 9))  # the pilot's own cost
        report("home", await time_keys(pilot, ["down", "up", "tab", "tab", "slash", "r", "escape", "f1", "escape"]))
        app.open_path(monitor)
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.status == "finished"
                    and app.screen.shown_alerts > 0)
        report("live monitor", await time_keys(pilot, ["plus", "left_square_bracket", "minus", "l", "l", "0", "o",
                                                       "o", "o", "down", "enter", "0", "space", "space"]))
        report("alerts search", await time_keys(pilot, ["a", "slash", *"fc2", "enter", "escape"]))
        figures["finished monitor idle %"] = await idle_cpu(pilot, idle_s)
        await pilot.press("escape")
        app.open_path(compare)
        await until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.data is not None)
        report("compare browser", await time_keys(pilot, ["n", "n", "f", "s", "r", "2", "1", "3", "1", "pagedown",
                                                          "end", "home"]))
    return figures


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idling per measure")
    parser.add_argument("--steps", type=int, default=2000, help="steps of the monitor run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="probe-tui-bench-") as tmp:
        root = Path(tmp)
        monitor = write_monitor_run(root / "monitor_run", args.steps)
        compare = write_compare_result(root / "cmp")
        for size in ((120, 40), (80, 24)):
            print("{}x{}".format(*size))
            figures = asyncio.run(measure(root, monitor, compare, size, args.idle))
            for name, value in figures.items():
                print("  {:<28} {:6.2f} % of a core".format(name, value))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

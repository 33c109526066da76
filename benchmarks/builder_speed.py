"""How fast the config builder opens, loads a file and moves between fields (``app_open_speed.py --builder``).

    python benchmarks/builder_speed.py [--repeat 5] [--tabs 30]

Headless (``App.run_test``, 120x40), on the real schemas:

- open: from ``open_builder`` (the statistics starter, as ``n`` then a task does) to the first frame of the
  validated form;
- load: a shipped sample (``monitor.json``, the biggest form) read into an open builder (ctrl+o), to the first
  frame of its validated form;
- tab: one Tab from field to field, to the next frame (the mean and the worst of ``--tabs`` presses).

Wall times (``*_ms``) depend on the machine's load: print ``uptime`` beside them; the process's CPU times
(``*_cpu_ms``, all threads) compare two versions on a busy machine better. Targets (issue 19, load ~1): open < 300 ms,
tab < 50 ms.
"""

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def _frame(pilot: Any) -> None:
    """Wait for the app to process what is queued and paint."""
    await pilot.pause()
    await pilot.app.animator.wait_until_complete()


async def _builder_ready(pilot: Any, previous: Any = None) -> Any:
    from probe_tui.app.screens.builder import BuilderScreen

    app = pilot.app
    while True:
        screen = app.screen
        if (isinstance(screen, BuilderScreen) and screen.is_mounted and screen is not previous
                and screen.query("#form") and screen._baseline is not None):
            return screen
        await pilot.pause(0.001)


async def measure_builder(repeat: int, tabs: int) -> Dict[str, Any]:
    import schemas
    from probe_tui.app.app import ProbeApp

    samples = ROOT / "sample_configs"
    figures: Dict[str, List[float]] = {"open_ms": [], "load_ms": [], "tab_ms": [],
                                       "open_cpu_ms": [], "load_cpu_ms": [], "tab_cpu_ms": []}
    with tempfile.TemporaryDirectory(prefix="probe-builder-bench-") as folder:
        app = ProbeApp(Path(folder), root_label="~/bench")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.5)
            home = app.screen
            for _ in range(repeat):
                start, cpu = time.perf_counter(), time.process_time()
                app.open_builder(schemas.starter_config("statistics"), path=None)
                builder = await _builder_ready(pilot)
                await _frame(pilot)
                figures["open_ms"].append((time.perf_counter() - start) * 1000)
                figures["open_cpu_ms"].append((time.process_time() - cpu) * 1000)
                start, cpu = time.perf_counter(), time.process_time()
                app.load_into_builder(samples / "monitor.json", screen=builder)
                old_form = builder.form
                while builder.form is old_form or not builder.form.is_mounted:
                    await pilot.pause(0.001)
                await _frame(pilot)
                figures["load_ms"].append((time.perf_counter() - start) * 1000)
                figures["load_cpu_ms"].append((time.process_time() - cpu) * 1000)
                builder.form.focus_first()
                await _frame(pilot)
                for _ in range(tabs):
                    start, cpu = time.perf_counter(), time.process_time()
                    await pilot.press("tab")
                    await _frame(pilot)
                    figures["tab_ms"].append((time.perf_counter() - start) * 1000)
                    figures["tab_cpu_ms"].append((time.process_time() - cpu) * 1000)
                builder.dismiss()
                while app.screen is not home:
                    await pilot.pause(0.001)
    out: Dict[str, Any] = {}
    for name, values in figures.items():
        out[name] = {"median": round(statistics.median(values), 1), "max": round(max(values), 1),
                     "n": len(values)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tabs", type=int, default=30)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure_builder(args.repeat, args.tabs)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

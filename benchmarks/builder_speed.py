"""How fast the config builder opens, loads a file and moves between fields (``app_open_speed.py --builder``).

    python benchmarks/builder_speed.py [--repeat 5] [--tabs 30]

Headless (``App.run_test``, 120x40), on the real schemas:

- open: from ``open_builder`` (the statistics starter, as ``n`` then a task does) to the first frame drawn with
  the validated form (the form mounts a screenful of rows first, the rest after that frame); the time is taken
  as that frame is drawn (``App._display``), not when the benchmark next gets a turn;
- open_built: the same, to when every row of the form is mounted and drawn;
- load: a shipped sample (``monitor.json``, the biggest form) read into an open builder (ctrl+o), to the first
  frame drawn with its validated form; load_built: to when all of it is mounted;
- tab: one Tab from field to field on the whole form, to the next frame (the median and the worst of ``--tabs``
  presses). Textual's pilot waits for every widget of the screen twice a press: ``pilot_ms`` is what two such
  waits cost with nothing to do, a share of each tab figure that a real terminal does not pay. tab_frame: the
  same press, to the first frame drawn with the focus moved (the pilot's waits run meanwhile on the same loop).

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
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def _frame(pilot: Any) -> None:
    """Wait for the app to process what is queued and paint."""
    await pilot.pause()
    await pilot.app.animator.wait_until_complete()


class _Frames:
    """Counts the frames the app draws (``App._display`` with an update) and notes the wall and CPU time of the
    first one drawn once a condition holds (the builder shown with its validated form)."""

    def __init__(self, app: Any) -> None:
        self.count = 0
        self.condition: Optional[Callable[[], bool]] = None
        self.drawn_at: Optional[Tuple[float, float]] = None
        self._drawn = asyncio.Event()
        original = app._display

        def display(screen: Any, renderable: Any) -> None:
            original(screen, renderable)
            if renderable is not None:
                self.count += 1
                if self.condition is not None and self.condition():
                    self.drawn_at = (time.perf_counter(), time.process_time())
                    self.condition = None
                    self._drawn.set()

        app._display = display

    def expect(self, condition: Callable[[], bool]) -> None:
        self.condition, self.drawn_at = condition, None
        self._drawn.clear()

    async def drawn(self) -> Tuple[float, float]:
        """Wait for the frame :meth:`expect` asked for; its ``(wall, cpu)`` times."""
        await self._drawn.wait()  # not a polling loop: it would take CPU from what is measured
        assert self.drawn_at is not None
        return self.drawn_at

    async def next_after(self, pilot: Any, count: int) -> None:
        while self.count <= count:
            await asyncio.sleep(0.001)


async def _built(pilot: Any, builder: Any) -> None:
    """Wait until every row of the builder's form is mounted, then for the frame."""
    from probe_tui.app.form.model_form import next_to_build

    while next_to_build(builder.form) is not None:
        await asyncio.sleep(0.002)
    await _frame(pilot)


def _shown_validated(app: Any) -> bool:
    """The builder is the screen shown and has validated its form (its ``on_mount``)."""
    from probe_tui.app.screens.builder import BuilderScreen

    screen = app.screen
    return isinstance(screen, BuilderScreen) and screen._baseline is not None


def _new_form_shown(builder: Any, old_holder: Any) -> bool:
    """The form a load builds has replaced ``old_holder``'s (the builder validates it in the same call)."""
    return builder._holder is not old_holder and builder._holder.display and builder.form.is_mounted


def _focus_moved(builder: Any, before: Any) -> bool:
    return builder.focused is not before


async def _settle(pilot: Any) -> None:
    """Let the app finish what is queued (two frames and a short pause)."""
    await _frame(pilot)
    await pilot.pause(0.05)
    await _frame(pilot)


async def _builder_ready(pilot: Any, previous: Any = None) -> Any:
    from probe_tui.app.screens.builder import BuilderScreen

    app = pilot.app
    while True:
        screen = app.screen
        if (isinstance(screen, BuilderScreen) and screen.is_mounted and screen is not previous
                and screen.query("#form") and screen._baseline is not None):
            return screen
        await asyncio.sleep(0.001)


async def measure_builder(repeat: int, tabs: int) -> Dict[str, Any]:
    import schemas
    from probe_tui.app.app import ProbeApp

    samples = ROOT / "sample_configs"
    figures: Dict[str, List[float]] = {name: [] for name in (
        "open_ms", "open_built_ms", "load_ms", "load_built_ms", "tab_ms", "tab_frame_ms", "pilot_ms",
        "open_cpu_ms", "open_built_cpu_ms", "load_cpu_ms", "load_built_cpu_ms", "tab_cpu_ms", "tab_frame_cpu_ms",
        "pilot_cpu_ms")}

    def note(name: str, start: float, cpu: float, at: Optional[Tuple[float, float]] = None) -> None:
        wall_now, cpu_now = at if at is not None else (time.perf_counter(), time.process_time())
        figures[name + "_ms"].append((wall_now - start) * 1000)
        figures[name + "_cpu_ms"].append((cpu_now - cpu) * 1000)

    with tempfile.TemporaryDirectory(prefix="probe-builder-bench-") as folder:
        app = ProbeApp(Path(folder), root_label="~/bench")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.5)
            home = app.screen
            frames = _Frames(app)
            for _ in range(repeat):
                start, cpu = time.perf_counter(), time.process_time()
                frames.expect(lambda: _shown_validated(app))
                app.open_builder(schemas.starter_config("statistics"), path=None)
                note("open", start, cpu, await frames.drawn())
                builder = await _builder_ready(pilot)
                await _built(pilot, builder)
                note("open_built", start, cpu)
                await _settle(pilot)
                start, cpu = time.perf_counter(), time.process_time()
                old_holder = builder._holder
                frames.expect(partial(_new_form_shown, builder, old_holder))
                app.load_into_builder(samples / "monitor.json", screen=builder)
                note("load", start, cpu, await frames.drawn())
                await _built(pilot, builder)
                note("load_built", start, cpu)
                builder.form.focus_first()
                await _frame(pilot)
                for _ in range(tabs):
                    before = builder.focused
                    frames.expect(partial(_focus_moved, builder, before))
                    start, cpu = time.perf_counter(), time.process_time()
                    await pilot.press("tab")
                    await _frame(pilot)
                    note("tab", start, cpu)
                    note("tab_frame", start, cpu, await frames.drawn())
                for _ in range(tabs):
                    start, cpu = time.perf_counter(), time.process_time()
                    await _frame(pilot)
                    await _frame(pilot)
                    note("pilot", start, cpu)
                builder.dismiss()
                while app.screen is not home:
                    await pilot.pause(0.001)
                await _settle(pilot)  # the builder's removal is not part of the next open
    out: Dict[str, Any] = {}
    for name, values in figures.items():
        out[name] = {"median": round(statistics.median(values), 1), "max": round(max(values), 1),
                     "n": len(values)}
        if len(values) <= 10:
            out[name]["all"] = [round(v) for v in values]
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

"""Does every key of every main view answer at once (< 100 ms)?

    python benchmarks/app_key_speed.py [--keep DIR | --reuse DIR] [--size 120x40] [--only VIEW] [--profile VIEW]
                                       [--profile-key LABEL] [--repeat N] [--every-key] [--idle S]

Makes realistic data the way a user does, in a work folder: the demo's three sample runs (``statistics.json``,
``statistics_lowp.json``, ``compare.json``: two dumps and their compare result), ``tensor_lowp.json`` and
``acc_check.json`` (an acc_check result), ``diagnose.json`` (a verdict), and a finished monitor run of 2,000 steps
with a recurring spike (``app_idle_cpu.write_monitor_run``). Then opens each main view headless
(``App.run_test``) — home, the compare browser (its results, first-divergence and tree tabs), the dump browser,
the run summary, the monitor, the acc_check result, the diagnose verdict — and presses each of its bound keys and
the navigation keys (down, pagedown, end, home, tab, enter, /, the filter and sort keys). A key is timed from the
press to the app being idle again (its messages handled, its workers done, the detail of the row it lands on
read, a repaint): wall time and the CPU time of the process (all threads), the pilot's own cost and the wait for
the detail (the same for a key bound to nothing) taken off; and the last frame: when the app wrote the last frame
of the key's answer to the terminal, from the press (what the user sees settle; 0 for a key that changes nothing
on screen). A key that
opens another screen or a search field is closed again (escape) untimed.

Prints per view the median and the worst key, and the keys over 100 ms; ``--profile VIEW`` runs that view's keys
under cProfile and prints the top functions, ``--profile-key LABEL`` one key alone (as the report names it:
``"divergence 2"``); ``--repeat N`` passes over each view N times and takes each key's median (a shared machine's
figures vary by a third from pass to pass); ``--every-key`` prints each key's figure; ``--idle S`` measures each
view's CPU over S seconds of nothing pressed, after its keys (the target is < 1 % of a core). Run it at a load of about 1 (``uptime``); nothing is asserted.
"""

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SAMPLES = ROOT / "sample_configs"
RUNS = ("statistics.json", "statistics_lowp.json", "compare.json", "tensor_lowp.json", "acc_check.json",
        "diagnose.json")
TARGET_MS = 100.0
SETTLE_S = 0.15
"""Longer than a view waits for the cursor to rest before it reads a detail; the same for the floor, taken off."""


def make_data(work: Path) -> None:
    """The sample runs, in ``work`` as a user would run them, and a finished monitor run."""
    from app_idle_cpu import write_monitor_run

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for sample in RUNS:
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "probe_tui", "--run", str(SAMPLES / sample)], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit("{} failed: {}".format(sample, done.stderr[-2000:]))
        print("  ran {} in {:.1f} s".format(sample, time.monotonic() - start), flush=True)
    write_monitor_run(work / "probe_dump" / "monitor_run", 2000)


def newest(folder: Path, marker: str) -> Path:
    """The newest run folder under ``folder`` that holds ``marker``."""
    found = sorted((p.parent for p in folder.rglob(marker) if "latest" not in p.parts), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit("no {} under {}".format(marker, folder))
    return found[-1]


class Timer:
    """Press keys on a view and time each one until the app is idle again."""

    def __init__(self, pilot: Any, floor_ms: Tuple[float, float] = (0.0, 0.0)) -> None:
        self.pilot = pilot
        self.floor = floor_ms
        self.figures: List[Tuple[str, float, float, float]] = []
        self.profile_keys: Sequence[str] = ()
        """Labels of keys (``"divergence 2"``, ``"enter"``) to run under cProfile, one by one."""
        self.profiles: List[str] = []

    async def settle(self) -> None:
        """Until the key's work is on screen: its workers, then what a view does once the cursor rests (the
        detail panes wait ~80 ms for it), then their workers and a repaint."""
        await workers_done(self.pilot.app)
        await self.pilot.pause(SETTLE_S)
        await workers_done(self.pilot.app)
        await self.pilot.pause()

    async def press(self, key: str) -> Tuple[float, float, float]:
        frames = FrameClock.of(self.pilot.app)
        wall, cpu = time.perf_counter(), time.process_time()
        frames.last = 0.0
        await self.pilot.press(key)
        await self.settle()
        return ((time.perf_counter() - wall) * 1000.0 - self.floor[0],
                (time.process_time() - cpu) * 1000.0 - self.floor[1],
                max(0.0, (frames.last - wall) * 1000.0))

    async def keys(self, view: Any, keys: Sequence[str], label: str = "") -> None:
        from textual.widgets import Input

        app = self.pilot.app
        for key in keys:
            name = (label + " " if label else "") + key
            profiler = cProfile.Profile() if name in self.profile_keys else None
            if profiler is not None:
                profiler.enable()
            wall, cpu, frame = await self.press(key)
            if profiler is not None:
                profiler.disable()
                out = io.StringIO()
                stats = pstats.Stats(profiler, stream=out)
                stats.sort_stats("cumulative").print_stats(40)
                stats.sort_stats("tottime").print_stats(20)
                self.profiles.append("---- {} ----\n{}".format(name, out.getvalue()))
            self.figures.append((name, wall, cpu, frame))
            for _ in range(5):  # back to the view: close what the key opened (untimed)
                if app.screen is view and not isinstance(app.focused, Input):
                    break
                await self.pilot.press("escape")
                await self.settle()


async def workers_done(app: Any) -> None:
    """Until the app's workers are done; one a view cancelled (an exclusive worker replaced by a later one: a
    listing scanned again, a detail of another row) is not waited for (Textual's ``wait_for_complete`` raises)."""
    running = [worker for worker in app.workers if not worker.is_cancelled]
    if running:  # (an empty list means every worker to Textual)
        await app.workers.wait_for_complete(running)


class FrameClock:
    """When the app last wrote a frame to its (headless) terminal: wraps the app's one way out, ``_display``."""

    def __init__(self, app: Any) -> None:
        self.last = 0.0
        write = app._display

        def display(screen: Any, update: Any) -> Any:
            self.last = time.perf_counter()
            return write(screen, update)

        app._display = display

    @staticmethod
    def of(app: Any) -> "FrameClock":
        clock = getattr(app, "_bench_frames", None)
        if clock is None:
            clock = app._bench_frames = FrameClock(app)
        return clock


async def until(pilot: Any, predicate: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError("the app did not get there in {:.0f} s".format(timeout))
        await pilot.pause(0.02)


NAV = ["down", "down", "pagedown", "pageup", "end", "home"]


async def open_on(pilot: Any, path: Path, screen_type: type, ready: Callable[[Any], Any]) -> Any:
    app = pilot.app
    app.open_path(path)
    screen = await until(pilot, lambda: isinstance(app.screen, screen_type) and app.screen.is_mounted and app.screen)
    await until(pilot, lambda: ready(screen))
    await workers_done(app)
    await pilot.pause(0.3)
    return screen


async def view_home(pilot: Any, timer: Timer, work: Path) -> None:
    from probe_tui.app.screens.home import HomeScreen

    home = await until(pilot, lambda: isinstance(pilot.app.screen, HomeScreen) and pilot.app.screen.scanned
                       and pilot.app.screen)
    await timer.keys(home, NAV + ["tab", "down", "tab", "slash", "f", "r", "enter", "o"])


async def view_compare(pilot: Any, timer: Timer, work: Path) -> None:
    from probe_tui.app.screens.compare import CompareScreen

    screen = await open_on(pilot, compare_folder(work), CompareScreen, lambda s: s.data is not None)
    await timer.keys(screen, NAV + ["n", "n", "N", "f", "f", "s", "s", "r", "d", "d", "slash", "g", "enter"],
                     "results")
    await timer.keys(screen, ["2"] + NAV + ["enter"], "divergence")
    await timer.keys(screen, ["3"] + NAV + ["enter", "down", "enter", "g"], "tree")
    await timer.keys(screen, ["1"], "results")


def compare_folder(work: Path) -> Path:
    return newest(work / "probe_dump", "compare.h5")


async def view_dump(pilot: Any, timer: Timer, work: Path) -> None:
    from probe_tui.app.screens.dump import DumpScreen

    run = newest(work / "probe_dump" / "demo_lowp", "run.json")
    screen = await open_on(pilot, run, DumpScreen, lambda s: s.index is not None)
    await timer.keys(screen, ["enter", "down", "enter", "down", "enter"] + NAV + ["f", "f", "slash", "n", "l", "l",
                                                                                    "i"])


async def view_summary(pilot: Any, timer: Timer, work: Path) -> None:
    from probe_tui.app.screens.summary import RunSummaryScreen

    app = pilot.app
    run = newest(work / "probe_dump" / "demo_lowp", "run.json")
    app.open_path(run, kind="run")
    screen = await until(pilot, lambda: isinstance(app.screen, RunSummaryScreen) and app.screen.summary is not None
                         and app.screen)
    await workers_done(app)
    await timer.keys(screen, NAV + ["tab", "down"])


async def view_monitor(pilot: Any, timer: Timer, work: Path) -> None:
    from probe_tui.app.screens.monitor import MonitorScreen

    screen = await open_on(pilot, work / "probe_dump" / "monitor_run", MonitorScreen,
                           lambda s: s.status == "finished" and s.shown_alerts > 0)
    await timer.keys(screen, ["plus", "left_square_bracket", "right_square_bracket", "minus", "l", "l", "0", "space",
                              "space", "s"])
    await timer.keys(screen, ["a"] + NAV + ["o", "o", "o", "enter", "slash", "f"], "alerts")


async def view_acc_check(pilot: Any, timer: Timer, work: Path) -> None:
    from probe_tui.app.screens.acc_check import AccCheckScreen

    screen = await open_on(pilot, acc_check_folder(work), AccCheckScreen, lambda s: getattr(s, "result", None) is not None)
    await timer.keys(screen, NAV + ["e", "s", "slash", "f", "f", "enter", "tab"])


def acc_check_folder(work: Path) -> Path:
    return newest(work / "probe_dump", "acc_check.h5")


async def view_diagnose(pilot: Any, timer: Timer, work: Path) -> None:
    from probe_tui.app.screens.diagnose import DiagnoseScreen

    verdict = newest(work / "probe_dump" / "diagnose", "verdict.json")
    screen = await open_on(pilot, verdict, DiagnoseScreen, lambda s: True)
    await timer.keys(screen, NAV + ["tab", "down", "c"])


VIEWS = {"home": view_home, "compare": view_compare, "dump": view_dump, "summary": view_summary,
         "monitor": view_monitor, "acc_check": view_acc_check, "diagnose": view_diagnose}


def merge(runs: List[List[Tuple[str, float, float, float]]]) -> List[Tuple[str, float, float, float]]:
    """Several passes over a view: each key's median wall, CPU and last frame (keys by their place in the pass)."""
    return [(runs[0][n][0], *(statistics.median(r[n][i] for r in runs) for i in (1, 2, 3)))  # type: ignore[misc]
            for n in range(min(len(r) for r in runs))]


async def measure(work: Path, size: Tuple[int, int], only: Sequence[str], profile: Optional[str],
                  profile_keys: Sequence[str] = (), repeat: int = 1, idle_s: float = 0.0) -> Dict[str, Any]:
    from probe_tui.app.app import ProbeApp
    from probe_tui.app.screens.home import HomeScreen

    app = ProbeApp(work, root_label="~/bench")
    results: Dict[str, Any] = {}
    async with app.run_test(size=size) as pilot:
        home = await until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned and app.screen)
        floor = Timer(pilot)
        await floor.keys(home, ["f12"] * 9)
        base = (statistics.median(f[1] for f in floor.figures), statistics.median(f[2] for f in floor.figures))
        results["floor"] = base
        for name, view in [(n, v) for _ in range(repeat) for n, v in VIEWS.items()]:
            if only and name not in only:
                continue
            timer = Timer(pilot, base)
            timer.profile_keys = profile_keys
            profiler = cProfile.Profile() if name == profile else None
            if profiler is not None:
                profiler.enable()
            await view(pilot, timer, work)
            if profiler is not None:
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
                results["profile"] = out.getvalue()
            if idle_s > 0:  # nothing pressed: what the view costs while the user reads it
                await pilot.pause(0.5)
                cpu, wall = time.process_time(), time.monotonic()
                await asyncio.sleep(idle_s)
                results.setdefault("idle", {}).setdefault(name, []).append(
                    100.0 * (time.process_time() - cpu) / (time.monotonic() - wall))
            results.setdefault("passes", {}).setdefault(name, []).append(timer.figures)
            results[name] = merge(results["passes"][name])
            if timer.profiles:
                results.setdefault("key_profiles", []).extend(timer.profiles)
            while app.screen is not home:
                await pilot.press("escape")
                await timer.settle()
    return results


def report(results: Dict[str, Any], every_key: bool = False) -> None:
    wall, cpu = results["floor"]
    print("  floor (a key bound to nothing, taken off below): {:.1f} ms wall, {:.1f} ms CPU".format(wall, cpu))
    for name in VIEWS:
        figures = results.get(name)
        if not figures:
            continue
        walls = [f[1] for f in figures]
        cpus = [f[2] for f in figures]
        worst = max(figures, key=lambda f: f[1])
        last = max(figures, key=lambda f: f[3])
        slow = ", ".join("{} {:.0f}/{:.0f}/{:.0f}".format(*f) for f in figures
                         if f[1] > TARGET_MS or f[2] > TARGET_MS / 2 or f[3] > TARGET_MS)
        print("  {:<10} {:>3} keys  wall median {:6.1f} worst {:6.1f} ms ({})  CPU median {:6.1f} worst {:6.1f} ms  "
              "last frame worst {:6.1f} ms ({})".format(name, len(figures), statistics.median(walls), worst[1], worst[0],
                                                        statistics.median(cpus), max(cpus), last[3], last[0]))
        if slow:
            print("             over {:.0f} ms wall or last frame, or {:.0f} ms CPU (wall/CPU/frame): {}".format(
                TARGET_MS, TARGET_MS / 2, slow))
    for name, values in results.get("idle", {}).items():
        print("  {:<10} idle {:.2f} % of a core (over {} s, {} pass{})".format(
            name, statistics.median(values), results.get("idle_s", 0), len(values), "es" if len(values) > 1 else ""))
    if every_key:
        print("  each key, CPU ms (wall ms, last frame ms):")
        for name in VIEWS:
            figures = results.get(name)
            if figures:
                print("  {:<10} ".format(name) + ", ".join("{} {:.0f} ({:.0f}, {:.0f})".format(f[0], f[2], f[1], f[3])
                                                       for f in figures))
    if "profile" in results:
        print(results["profile"])
    for text in results.get("key_profiles", ()):
        print(text)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="make the data in DIR and keep it")
    parser.add_argument("--reuse", type=Path, help="use the data --keep made in DIR")
    parser.add_argument("--size", default="120x40")
    parser.add_argument("--only", action="append", default=[], choices=sorted(VIEWS))
    parser.add_argument("--profile", choices=sorted(VIEWS))
    parser.add_argument("--repeat", type=int, default=1, help="pass over each view N times, each key's median")
    parser.add_argument("--every-key", action="store_true", help="print each key's CPU ms (median of the passes)")
    parser.add_argument("--idle", type=float, default=0.0, metavar="S",
                        help="after a view's keys, its CPU over S s of nothing pressed (target < 1 %%)")
    parser.add_argument("--profile-key", action="append", default=[], metavar="LABEL",
                        help="run this key (as the report names it: 'divergence 2', 'enter') under cProfile alone")
    args = parser.parse_args(argv)
    size = tuple(int(n) for n in args.size.split("x"))
    tmp = None
    if args.reuse is not None:
        work = args.reuse
    else:
        work = args.keep or Path(tempfile.mkdtemp(prefix="probe-tui-keys-"))
        tmp = None if args.keep else work
        work.mkdir(parents=True, exist_ok=True)
        print("making the data in {}".format(work), flush=True)
        make_data(work)
    print("load average {:.2f} {:.2f} {:.2f}; {}x{}".format(*os.getloadavg(), *size), flush=True)
    try:
        results = asyncio.run(measure(work, size, args.only, args.profile, args.profile_key,  # type: ignore[arg-type]
                                      max(1, args.repeat), args.idle))
        results["idle_s"] = args.idle
        report(results, args.every_key)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

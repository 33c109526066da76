"""Where a captured record's time goes: cProfile over probe-tui statistics steps on issue 21's tiny preset.

    python benchmarks/capture_profile.py [--steps 20] [--mode "statistics L1"] [--top 20] [--timing 200]

The same config.json and PrecisionDebugger calls as benchmarks/side_by_side.py, in this process, torch on one
thread. Profiles ``steps`` instrumented steps and as many bare steps of an identical model, then prints microseconds
per record by phase (each function's own time; a builtin or torch function's time goes to the phase of whichever
of our functions called it, else to "model, torch") and the top functions by own time. cProfile adds its own cost
to every Python call, so the absolute figures run high; the shares are what to read. Also printed: Python
function calls per record (cProfile's count, instrumented minus bare: deterministic, unlike the timings) and, with
``--timing N``, N more interleaved step pairs without the profiler: median microseconds added per record, wall and
process CPU time.
"""

import argparse
import cProfile
import json
import pstats
import shutil
import statistics as st
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.side_by_side import MODES, PRESETS, _Work, msprobe_config  # noqa: E402

# phase -> path fragments of our modules (first match wins)
PHASES: List[Tuple[str, Tuple[str, ...]]] = [
    ("statistics", ("tensor_stats", "grad_probe_stats", "xhash", "engines/native/")),
    ("store, step end", ("engines/store/", "capture/sink", "capture/summary", "capture/session",
                         "adapters/torch/session", "capture/highlights")),
    ("naming, call stack", ("capture/naming", "capture/stacks")),
    ("flatten, entries, records", ("flatten", "entries", "capture/records", "capture/processor",
                                   "capture/filters")),
    ("hooks, dispatch", ("adapters/torch/", "engines/capture/", "probe_tui/")),
]
OTHER = "model, torch"


def phase_of(filename: str) -> str:
    path = filename.replace("\\", "/")
    if "/engines/" not in path and "/probe_tui/" not in path:
        return OTHER
    for name, fragments in PHASES:
        if any(f in path for f in fragments):
            return name
    return "other probe-tui"


def by_phase(stats: pstats.Stats) -> Dict[str, Tuple[float, float]]:
    """(seconds, calls) per phase: own time and calls of our functions, builtins' and torch's split over their
    callers."""
    out: Dict[str, Tuple[float, float]] = {}

    def add(phase: str, secs: float, calls: float) -> None:
        t, c = out.get(phase, (0.0, 0.0))
        out[phase] = (t + secs, c + calls)

    raw: Dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for func, (_cc, nc, tt, _ct, callers) in raw.items():
        phase = phase_of(func[0])
        if "_probe_fastpath." in func[2]:  # the native fast path's C calls (engines/native/pyext/fastpath.c)
            phase = "statistics"
        if phase != OTHER or not callers:
            add(phase, tt, nc)
            continue
        for caller, info in callers.items():
            add(phase_of(caller[0]), info[2], info[1])
    return out


def warm_pair(preset: str, mode: str, folder: Path) -> Tuple[Any, Callable[[], None], Any]:
    """Two copies of ``preset``'s model, a bare one and one captured in ``mode`` (side_by_side.py's msprobe config
    through PrecisionDebugger, dumped under ``folder``), each stepped three times: (bare, the captured step, the
    debugger). The set-up of capture_profile.py and hook_phases.py."""
    from probe_tui.debugger import PrecisionDebugger

    bare, work = _Work(PRESETS[preset]), _Work(PRESETS[preset])
    cfg = folder / "config.json"
    cfg.write_text(json.dumps(msprobe_config(mode, str(folder / "dump"))))
    debugger = PrecisionDebugger(config_path=str(cfg))

    def captured() -> None:
        debugger.start(work.model)
        work.step()
        debugger.stop()
        debugger.step()

    for _ in range(3):
        bare.step()
        captured()
    return bare, captured, debugger


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--mode", default="statistics L1", choices=list(MODES))
    parser.add_argument("--preset", default="tiny", choices=list(PRESETS))
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--timing", type=int, default=0, help="step pairs timed without the profiler")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="capture-profile-"))
    try:
        bare, captured, debugger = warm_pair(args.preset, args.mode, tmp)
        prof_bare, prof_arm = cProfile.Profile(), cProfile.Profile()
        for _ in range(args.steps):
            prof_bare.runcall(bare.step)
            prof_arm.runcall(captured)
        wall: List[float] = []
        cpu: List[float] = []
        for _ in range(args.timing):
            pair = []
            for fn in (bare.step, captured):
                w0, c0 = time.perf_counter(), time.process_time()
                fn()
                pair.append((time.perf_counter() - w0, time.process_time() - c0))
            wall.append(pair[1][0] - pair[0][0])
            cpu.append(pair[1][1] - pair[0][1])
        summary = debugger.close()
        records = int(summary.get("records", 0)) / (args.steps + 3 + args.timing)
        s_bare, s_arm = pstats.Stats(prof_bare), pstats.Stats(prof_arm)
        t_bare = s_bare.total_tt / args.steps  # type: ignore[attr-defined]
        t_arm = s_arm.total_tt / args.steps  # type: ignore[attr-defined]
        n = args.steps * records
        print("%s %s, %d profiled steps: bare %.1f ms, instrumented %.1f ms a step (under cProfile), %.0f records a "
              "step, %.0f µs added per record" % (args.preset, args.mode, args.steps, t_bare * 1e3, t_arm * 1e3,
                                                 records, (t_arm - t_bare) / records * 1e6))
        calls = (s_arm.total_calls - s_bare.total_calls) / n  # type: ignore[attr-defined]
        print("Python function calls per record (cProfile, instrumented minus bare): %.1f" % calls)
        if wall:
            print("without the profiler, %d step pairs: %.1f µs added per record (wall), %.1f µs (CPU)"
                  % (len(wall), st.median(wall) / records * 1e6, st.median(cpu) / records * 1e6))
        phases = by_phase(s_arm)
        bare_secs, bare_calls = (sum(v) for v in zip(*by_phase(s_bare).values()))
        print("\n| phase | µs per record | share of the added time | calls per record |\n|---|---|---|---|")
        added = t_arm - t_bare
        for name, (secs, ncalls) in sorted(phases.items(), key=lambda kv: -kv[1][0]):
            if name == OTHER:
                secs -= bare_secs  # what the bare step costs anyway
                ncalls -= bare_calls
                name = OTHER + " (beyond the bare step)"
            print("| %s | %.1f | %.0f %% | %.1f |" % (name, secs / n * 1e6, 100 * secs / args.steps / added,
                                                     ncalls / n))
        print("\n| function | calls per record | own µs per record | phase |\n|---|---|---|---|")
        raw: Dict[Any, Any] = s_arm.stats  # type: ignore[attr-defined]
        top = sorted(raw.items(), key=lambda kv: -kv[1][2])[:args.top]
        for func, (_cc, nc, tt, _ct, _callers) in top:
            where = func[0].split("i21-bench/")[-1].split("site-packages/")[-1]
            print("| %s:%d %s | %.2f | %.1f | %s |" % (where, func[1], func[2], nc / n, tt / n * 1e6,
                                                       phase_of(func[0])))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

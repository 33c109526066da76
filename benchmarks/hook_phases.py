"""Where a module record's time goes, without a profiler: the capture's hook entry points timed by wall clock.

    python benchmarks/hook_phases.py [--preset tiny] [--mode "statistics L0"] [--steps 200]

The same config.json and PrecisionDebugger calls as benchmarks/side_by_side.py, torch on one thread. Each of the
entry points below is wrapped with a ``perf_counter`` pair (~0.3 µs a call of its own) and timed over ``steps``
captured steps, interleaved with bare steps of an identical model (after 3 warm-up steps):

- the torch module hooks (``ModuleCapture._pre``: the call's inputs, parameters, name, stack and edges;
  ``_post``: its outputs and the backward hooks' ``attach``), the backward hooks firing (``_fire``), the
  parameter-gradient hook (``_param_grad``) and the step end (``CaptureSession.flush``: statistics read out, the
  store's write), each outermost call only;
- inside them (every call): the stack walk, ``add_row`` and ``TensorEntries.entry`` (its statistics included),
  the graph walk and hook registration (``attach``), the backward rows, the parameter-gradient rows;
- the garbage collector's time in the captured and the bare steps (``gc.callbacks``).

Printed: medians of the bare and captured steps, and per phase ms a step, µs a record and, for the inner ones,
calls a step and µs a call. cProfile (benchmarks/capture_profile.py) charges ~1 µs to every Python call and so
inflates the many small ones; these are wall times of the real path. On a shared machine read pairs run close in
time, and give the load.
"""

import argparse
import gc
import shutil
import statistics as st
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.capture_profile import warm_pair  # noqa: E402
from benchmarks.side_by_side import MODES, PRESETS  # noqa: E402

_acc: Dict[str, float] = {}
_calls: Dict[str, int] = {}
_order: List[str] = []  # the labels as registered: the table's rows
_depth = [0]


def _outer(owner: Any, name: str, label: str) -> None:
    """Time the outermost calls of ``owner.name`` (a hook that runs inside another's is counted once)."""
    orig: Callable[..., Any] = getattr(owner, name)
    _order.append(label)

    def timed(*a: Any, **k: Any) -> Any:
        if _depth[0]:
            return orig(*a, **k)
        _depth[0] += 1
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            _acc[label] = _acc.get(label, 0.0) + time.perf_counter() - t0
            _depth[0] -= 1

    setattr(owner, name, timed)


def _every(owner: Any, name: str, label: str) -> None:
    orig: Callable[..., Any] = getattr(owner, name)
    _order.append(label)

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            _acc[label] = _acc.get(label, 0.0) + time.perf_counter() - t0
            _calls[label] = _calls.get(label, 0) + 1

    setattr(owner, name, timed)


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=list(PRESETS))
    parser.add_argument("--mode", default="statistics L0", choices=list(MODES))
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    import torch

    from engines.adapters.torch import entries as torch_entries
    from engines.adapters.torch import module_capture
    from engines.adapters.torch import session as torch_session
    from engines.capture import backward, modules, stacks
    from engines.capture import session as capture_session

    torch.set_num_threads(1)
    _outer(module_capture.ModuleCapture, "_pre", "module pre-hook")
    _every(stacks.StackTable, "current", "  stack (API or module_dump)")
    if hasattr(stacks.StackTable, "module_key"):
        _every(stacks.StackTable, "module_key", "  stack (module)")
    _every(modules.ModuleTree, "_take_edges", "  input edges")
    _outer(module_capture.ModuleCapture, "_post", "module post-hook")
    _every(module_capture, "attach", "  attach (graph walk, hooks)")
    _every(torch_session.TorchCaptureSession, "add_row", "  add_row (forward rows)")
    _every(torch_entries.TensorEntries, "entry", "  entries.entry (statistics included)")
    _outer(backward, "_fire", "backward hooks firing")
    _every(capture_session.CaptureSession, "backward_row", "  backward_row")
    _every(capture_session.CaptureSession, "finish_backward", "  finish_backward")
    _outer(module_capture.ModuleCapture, "_param_grad", "parameter-gradient hook")
    _every(modules.ModuleTree, "_param_row", "  _param_row")
    _outer(capture_session.CaptureSession, "flush", "step end (flush)")

    gc_time = [0.0, 0, 0.0]

    def on_gc(phase: str, info: Dict[str, Any]) -> None:
        if phase == "start":
            gc_time[2] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[2]
            gc_time[1] += 1

    gc.callbacks.append(on_gc)
    tmp = Path(tempfile.mkdtemp(prefix="hook-phases-"))
    try:
        bare, captured, debugger = warm_pair(args.preset, args.mode, tmp)
        _acc.clear()
        _calls.clear()
        t_bare: List[float] = []
        t_arm: List[float] = []
        gc_bare = [0.0, 0]
        gc_arm = [0.0, 0]
        for _ in range(args.steps):
            for fn, times, gcs in ((bare.step, t_bare, gc_bare), (captured, t_arm, gc_arm)):
                g0, n0 = gc_time[0], gc_time[1]
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                gcs[0] += gc_time[0] - g0
                gcs[1] += gc_time[1] - n0
        summary = debugger.close()
        records = int(summary.get("records", 0)) / (args.steps + 3)
        added = st.median(t_arm) - st.median(t_bare)
        print("%s %s, %d step pairs: %.0f records a step, bare %.2f ms, captured %.2f ms (medians), added %.2f ms "
              "(%.1f µs a record)" % (args.preset, args.mode, args.steps, records, st.median(t_bare) * 1e3,
                                     st.median(t_arm) * 1e3, added * 1e3, added / records * 1e6))
        print("\n| phase | ms a step | µs a record | calls a step | µs a call |\n|---|---|---|---|---|")
        for label in _order:
            secs = _acc.get(label, 0.0)
            n = _calls.get(label)
            if not secs:
                continue
            name = "↳ " + label.strip() if label.startswith(" ") else label
            print("| %s | %.3f | %.1f | %s | %s |" % (name, secs / args.steps * 1e3, secs / args.steps / records * 1e6,
                                                     "%.0f" % (n / args.steps) if n else "",
                                                     "%.2f" % (secs / n * 1e6) if n else ""))
        print("\ngarbage collections: bare %.2f a step, %.3f ms; captured %.2f a step, %.3f ms"
              % (gc_bare[1] / args.steps, gc_bare[0] / args.steps * 1e3, gc_arm[1] / args.steps,
                 gc_arm[0] / args.steps * 1e3))
    finally:
        gc.callbacks.remove(on_gc)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

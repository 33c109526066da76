"""msprobe and probe-tui side by side: the same msprobe config.json through each tool's PrecisionDebugger.

    python benchmarks/side_by_side.py [--preset default|tiny|llama|both|all] [--rounds 3] [--steps N] [--modes ...]
                                      [--quick] [--json FILE] [--memory-budget SIZE[,SIZE...]]
                                      [--async-dump off|on|off,on]

msprobe is optional: set PROBE_TUI_MSPROBE_PYTHON to a Python that has mindstudio-probe (and torch) installed;
without it (or when that Python cannot import msprobe) its columns are skipped with one line saying why.

Each (tool, preset, mode) runs in its own process (msprobe's debugger is a process-wide singleton; peak memory is
per process): two copies of the demo GPT with the same weights, one under the debugger and one never given to it
(the uninstrumented run), their steps alternated (bare, instrumented, bare, ...) so that drift and machine load hit
both alike; torch on one thread. A round is ``warmup`` pairs then ``steps`` measured pairs; the round's ratio is
median(instrumented step) / median(bare step); the figure is the median over rounds. An instrumented step is
``start(model)``, zero_grad + forward + loss + backward + AdamW, ``stop()``, ``step()``. Note that a tool which
patches framework APIs globally (msprobe) also slows the bare copy slightly while stopped; the bare copy never
gets module hooks.

Presets (issue 21): default = the reference workload (docs/decisions/0021-reference-workload.md: 4 blocks,
d 256, seq 64, batch 8); tiny = 2 blocks, d 32, 2 heads, MLP 64, vocab 100, seq 8, batch 2 (overhead-bound: how a
tool behaves next to fast accelerator kernels); llama = a tiny ``transformers`` LlamaForCausalLM (2 layers, hidden
32, MLP 64, 4 heads, 2 KV heads, vocab 128, random weights; batch 2, seq 12: a real architecture's op mix, a few
ms a step), run only when asked (``--preset llama`` or ``all``); it needs ``transformers`` in each tool's Python.

Printed: the table of ratios with the overhead share ((probe-tui ratio - 1) / (msprobe ratio - 1)), then per
tool, preset and mode: microseconds added per record (records counted from what the tool wrote: msprobe's
dump.json entries, probe-tui's store rows of records), records and files a step, and the growth of peak resident
memory over the process's bare warm-up (both copies stepped until that peak stops growing: ``WARM_MIN``...), with
an uninstrumented control per preset (the same loop, no tool: the noise floor of that figure; ``--no-control``
skips it); the machine's load (``uptime``) before and after.

The tensor dump's bandwidth: bytes the tool wrote a step over the time it added to the step (MB/s), next to this
disk's sequential write bandwidth measured in the same run where the dumps go (the temporary folder): 256 MiB in
4 MiB blocks, timed once to the page cache and once through ``fdatasync`` (as ``dd conv=fdatasync``).
``--memory-budget 8MiB,1GiB`` runs probe-tui once per ``output.memory_budget`` (the bound on full-tensor copies a
step holds before they are written), so the peak memory of several budgets is compared in one run;
``--async-dump off,on`` likewise runs probe-tui without and with its writer thread; with a writer thread, add
``--blocks`` (blocks of ``--steps`` steps alternate, the thread drained inside the captured block's time), since
single interleaved steps would let the thread's writing slow the next bare step instead. For probe-tui the step's end
is timed too: on the training thread (statistics to the host, the hand-over, and without a writer thread the
write and commit) and the store write with its commit alone, medians in ms. A statistics job's steps are
written by a writer process (engines/capture/writer_process.py; ``PROBE_TUI_WRITER=inline`` keeps them in the
training process): its CPU time a step and its peak resident memory are printed beside the training process's
figures, since its work is off the measured thread but not free.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
MSPROBE_ENV = "PROBE_TUI_MSPROBE_PYTHON"
MARK = "SIDE_BY_SIDE_RESULT "

# mode -> (task, level, summary_mode)
MODES: Dict[str, Tuple[str, str, str]] = {
    "statistics L0": ("statistics", "L0", "statistics"),
    "statistics L1": ("statistics", "L1", "statistics"),
    "statistics mix": ("statistics", "mix", "statistics"),
    "L1 + md5": ("statistics", "L1", "md5"),
    "tensor L1": ("tensor", "L1", "statistics"),
}
PRESETS: Dict[str, Dict[str, Any]] = {
    "default": {"preset": "default"},
    "tiny": {"preset": "tiny", "n_layer": 2, "d_model": 32, "n_head": 2, "d_mlp": 64, "vocab": 100, "seq": 8,
             "batch": 2},
    "llama": {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32},
}
PRESET_CHOICES = {"both": ["default", "tiny"], "all": ["default", "tiny", "llama"]}
TOOLS = ("msprobe", "probe-tui")
CONTROL = "uninstrumented"  # the worker's control: the same loop with no tool (memory's noise floor)


def disk_write_mb_s(folder: str, total_mb: int = 256, block_mb: int = 4) -> Tuple[float, float]:
    """(MB/s into the page cache, MB/s through fdatasync) of sequential 4 MiB writes into ``folder``."""
    block = os.urandom(block_mb << 20)
    path = Path(tempfile.mkstemp(prefix="side-by-side-dd-", dir=folder)[1])
    try:
        with open(path, "wb", buffering=0) as f:
            t0 = time.perf_counter()
            for _ in range(total_mb // block_mb):
                f.write(block)
            t1 = time.perf_counter()
            os.fdatasync(f.fileno())
            t2 = time.perf_counter()
        return total_mb / (t1 - t0), total_mb / (t2 - t0)
    finally:
        path.unlink()


def msprobe_config(mode: str, dump_path: str) -> Dict[str, Any]:
    """The one config.json both tools read (msprobe 26.2.0's keys)."""
    task, level, summary_mode = MODES[mode]
    cfg: Dict[str, Any] = {"task": task, "dump_path": dump_path, "rank": [], "step": [], "level": level,
                           "async_dump": False}
    if task == "statistics":
        cfg["statistics"] = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}
    else:
        cfg["tensor"] = {"scope": [], "list": [], "data_mode": ["all"]}
    return cfg


# -- the worker: one tool, one preset, one mode, in its own process ----------------------------------------------

class _Work:
    """The demo GPT (engines/adapters/torch/demo_model.py, torch-only so msprobe's Python can import it), AdamW
    and one fixed batch."""

    def __init__(self, knobs: Dict[str, Any]) -> None:
        import torch
        import torch.nn.functional as F

        from engines.adapters.torch.demo_model import build_model
        from engines.demo.data import batches
        from engines.demo.knobs import resolve_knobs

        self._torch, self._F = torch, F
        self.knobs = resolve_knobs(dict(knobs, steps=1))
        self.model = build_model(self.knobs)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.knobs.lr)
        x, y = next(iter(batches(self.knobs)))
        self.tokens, self.targets = torch.from_numpy(x), torch.from_numpy(y)

    def step(self) -> None:
        self.opt.zero_grad()
        logits = self.model(self.tokens)
        loss = self._F.cross_entropy(logits.view(-1, self.knobs.vocab), self.targets.view(-1))
        loss.backward()
        self.opt.step()


class _LlamaWork:
    """A tiny ``transformers`` LLaMA (random weights, eager attention), AdamW and one fixed batch of token ids."""

    def __init__(self, knobs: Dict[str, Any]) -> None:
        import torch
        import transformers

        config = transformers.LlamaConfig(**knobs)
        config._attn_implementation = "eager"
        self.model = transformers.LlamaForCausalLM(config)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.ids = torch.randint(0, knobs["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1))

    def step(self) -> None:
        self.opt.zero_grad()
        self.model(input_ids=self.ids, labels=self.ids).loss.backward()
        self.opt.step()


def _work(preset: str) -> Any:
    return (_LlamaWork if preset == "llama" else _Work)(PRESETS[preset])


def _peak_rss_mb() -> float:
    from benchmarks._workload import peak_rss_mb  # the worker has the repository on its path

    return peak_rss_mb()


# Warm-up before the baseline of peak memory: at least WARM_MIN pairs (bare, then the copy the tool will get),
# then until WARM_STEADY pairs in a row leave the peak where it was, at most WARM_MAX. After only two pairs the
# bare steps alone still raised the peak by 7-16 MB over the next ten (glibc's heap settling around torch's
# activations), which the figure then charged to the tool (issue 21, docs/CAPTURE.md "Memory (issue 21)").
WARM_MIN, WARM_STEADY, WARM_MAX = 4, 3, 16


def warm_to_steady_peak(steps: List[Any], peak: Any = None) -> int:
    """Run each of ``steps`` once a pair until the process's peak resident memory (``peak()``, MB) stops growing
    (see WARM_MIN/WARM_STEADY/WARM_MAX); returns the pairs run."""
    peak = peak or _peak_rss_mb
    steady = pairs = 0
    while pairs < WARM_MAX and (pairs < WARM_MIN or steady < WARM_STEADY):
        before = peak()
        for step in steps:
            step()
        pairs += 1
        steady = steady + 1 if peak() <= before else 0
    return pairs


def _msprobe_records(dump: Path) -> Tuple[int, int, int]:
    """(records, files, bytes) of msprobe's finished step folders under ``dump``, which are then removed (a tensor
    dump writes ~0.5 GB a step on the default preset)."""
    records = files = nbytes = 0
    for step_dir in [p for p in dump.glob("step*") if p.is_dir()]:
        for path in step_dir.rglob("*"):
            if path.is_file():
                files += 1
                nbytes += path.stat().st_size
                if path.name == "dump.json":
                    try:
                        records += len(json.loads(path.read_text()).get("data", {}))
                    except (OSError, ValueError):
                        pass
        shutil.rmtree(step_dir, ignore_errors=True)
    return records, files, nbytes


def _time_step_ends() -> Dict[str, List[float]]:
    """Wrap probe-tui's step end (training thread) and store write (``DumpSink._write``) to time them."""
    from engines.capture import session as capture_session
    from engines.capture import sink as capture_sink

    times: Dict[str, List[float]] = {"step_end": [], "write": []}

    def timed(owner: Any, name: str, key: str) -> None:
        fn = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times[key].append(time.perf_counter() - t0)

        setattr(owner, name, wrapper)

    timed(capture_session.CaptureSession, "_write_step", "step_end")
    timed(capture_sink.DumpSink, "_write", "write")
    return times


def worker(tool: str, preset: str, mode: str, rounds: int, steps: int, warmup: int,
           memory_budget: Optional[str] = None, async_dump: bool = False, blocks: bool = False) -> Dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    try:
        torch.manual_seed(0)
        bare, work = _work(preset), _work(preset)
        # both copies warmed (AdamW's state allocated, the heap settled) before the baseline of peak memory
        warm_pairs = warm_to_steady_peak([bare.step, work.step])
        rss0 = _peak_rss_mb()
        cfg_path = tmp / "config.json"
        dump = tmp / "dump"
        cfg = msprobe_config(mode, str(dump))
        ends: Dict[str, List[float]] = {}
        if tool == "probe-tui":
            if memory_budget:
                cfg["output"] = {"memory_budget": memory_budget}
            cfg["async_dump"] = async_dump
            ends = _time_step_ends()
        cfg_path.write_text(json.dumps(cfg))
        if tool == "msprobe":
            from msprobe.pytorch import PrecisionDebugger
        elif tool == "probe-tui":
            from probe_tui.debugger import PrecisionDebugger  # type: ignore[no-redef]
        else:  # CONTROL: no tool; the second copy steps bare too (the noise floor of the memory figure)
            PrecisionDebugger = _NoTool  # type: ignore[assignment,misc]
        debugger = PrecisionDebugger(config_path=str(cfg_path))
        records = files = nbytes = instrumented = 0

        def captured() -> None:
            debugger.start(work.model)
            work.step()
            debugger.stop()
            debugger.step()

        ratios: List[float] = []
        added: List[float] = []
        def drained() -> None:  # a writer thread's steps written, inside the block's time
            sink = getattr(getattr(getattr(debugger, "runner", None), "session", None), "sink", None)
            if hasattr(sink, "drain"):
                sink.drain()

        def block(fn: Any, last: Any = None) -> Any:
            def run() -> None:
                for _ in range(steps):
                    fn()
                if last is not None:
                    last()
            return run

        for _ in range(rounds):
            base_t: List[float] = []
            arm_t: List[float] = []
            pairs = ((block(bare.step), base_t), (block(captured, drained), arm_t)) if blocks else \
                ((bare.step, base_t), (captured, arm_t))
            for i in range(warmup + (1 if blocks else steps)):
                for fn, times in pairs:
                    t0 = time.perf_counter()
                    fn()
                    if i >= warmup:
                        times.append((time.perf_counter() - t0) / (steps if blocks else 1))
                instrumented += steps if blocks else 1
                if tool == "msprobe":
                    r, f, b = _msprobe_records(dump)
                    records, files, nbytes = records + r, files + f, nbytes + b
            ratios.append(statistics.median(arm_t) / statistics.median(base_t))
            added.append(statistics.median(arm_t) - statistics.median(base_t))
            base_s = statistics.median(base_t)
        writer: Dict[str, float] = {}
        if tool != "msprobe":
            sink = getattr(getattr(getattr(debugger, "runner", None), "session", None), "sink", None)
            summary = debugger.close()
            writer = dict(getattr(sink, "usage", None) or {})
            records = int(summary.get("records", 0))
            written = [p for p in dump.rglob("*") if p.is_file()]
            files = len(written)
            nbytes = sum(p.stat().st_size for p in written)
        rss_growth = _peak_rss_mb() - rss0
        # probe-tui's writer process (engines/capture/writer_process.py) tells at its end the CPU time it spent
        # on steps and its peak memory: reported beside the training process's
        writer_rss = writer.get("peak_rss_mb")
        per_step = records / instrumented if instrumented else 0.0
        mb_step = nbytes / max(instrumented, 1) / 1e6
        added_s = statistics.median(added)
        return {"tool": tool, "preset": preset, "mode": mode, "ratio": statistics.median(ratios),
                "ratio_min": min(ratios), "ratio_max": max(ratios), "base_ms": base_s * 1e3,
                "records_per_step": per_step, "files_per_step": files / max(instrumented, 1),
                "us_per_record": added_s / per_step * 1e6 if per_step else None,
                "rss_growth_mb": rss_growth, "warm_pairs": warm_pairs, "mb_per_step": mb_step,
                "write_mb_s": mb_step / added_s if added_s > 0 else None, "memory_budget": memory_budget,
                "async_dump": async_dump,
                "writer_cpu_ms": writer["step_cpu_s"] / writer["steps"] * 1e3 if writer.get("steps") else None,
                "writer_rss_mb": writer_rss,
                "step_end_ms": statistics.median(ends["step_end"]) * 1e3 if ends.get("step_end") else None,
                "write_ms": statistics.median(ends["write"]) * 1e3 if ends.get("write") else None}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _NoTool:
    """The control's stand-in for a debugger: every call does nothing."""

    def __init__(self, config_path: str) -> None:
        pass

    def start(self, model: Any = None) -> None:
        pass

    stop = step = start

    def close(self) -> Dict[str, Any]:
        return {}


# -- the driver -----------------------------------------------------------------------------------------------

def msprobe_python() -> Tuple[Optional[str], str]:
    """(the Python to run msprobe with, or None, and why not)."""
    python = os.environ.get(MSPROBE_ENV)
    if not python:
        return None, "%s is not set" % MSPROBE_ENV
    try:
        done = subprocess.run([python, "-c", "import msprobe.pytorch, torch"], capture_output=True, timeout=120,
                              cwd=str(ROOT))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "%s=%s cannot run (%s)" % (MSPROBE_ENV, python, exc)
    if done.returncode:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        return None, "%s=%s cannot import msprobe.pytorch (%s)" % (MSPROBE_ENV, python, last)
    return python, ""


def run_worker(python: str, tool: str, preset: str, mode: str, rounds: int, steps: int, warmup: int,
               timeout: float, memory_budget: Optional[str] = None, async_dump: bool = False,
               blocks: bool = False) -> Dict[str, Any]:
    cmd = [python, str(Path(__file__).resolve()), "--worker", tool, "--preset", preset, "--modes", mode,
           "--rounds", str(rounds), "--steps", str(steps), "--warmup", str(warmup)]
    if memory_budget:
        cmd += ["--memory-budget", memory_budget]
    if async_dump:
        cmd += ["--async-dump", "on"]
    if blocks:
        cmd += ["--blocks"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout, cwd=tempfile.gettempdir(), env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %.0f s" % timeout}
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK):]))
    tail = (done.stderr.decode(errors="replace").strip().splitlines() or ["exit %d" % done.returncode])[-1]
    return {"error": tail}


def share(msprobe: Optional[float], ours: Optional[float]) -> Optional[float]:
    """probe-tui's overhead over msprobe's: (ratio - 1) / (ratio - 1)."""
    if msprobe is None or ours is None or msprobe <= 1.0:
        return None
    return (ours - 1.0) / (msprobe - 1.0)


def _fmt(value: Optional[float], pattern: str) -> str:
    return "—" if value is None else pattern % value


def format_table(results: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]], presets: List[str],
                 modes: List[str]) -> List[str]:
    """The issue's table: results[preset][mode][tool] -> a worker's figures (or {"error": ...})."""
    head = ["mode"]
    for p in presets:
        head += ["%s: msprobe" % p, "%s: probe-tui" % p, "share"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode in modes:
        row = [mode]
        for p in presets:
            got = results.get(p, {}).get(mode, {})
            ms = got.get("msprobe", {}).get("ratio")
            ours = got.get("probe-tui", {}).get("ratio")
            row += [_fmt(ms, "%.2f×"), _fmt(ours, "%.2f×"), _fmt(share(ms, ours), "%.2f")]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def format_details(results: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]], presets: List[str],
                   modes: List[str]) -> List[str]:
    lines = ["| preset | mode | tool | ratio (spread) | µs/record | records/step | files/step | peak RSS growth "
             "| MB/step | MB/s written | step end / write (ms) | writer process: CPU ms/step, peak RSS |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in presets:
        for mode in modes:
            for tool, r in results.get(p, {}).get(mode, {}).items():  # msprobe, probe-tui, then other budgets
                if "error" in r:
                    lines.append("| %s | %s | %s | failed: %s | | | | | | | | |" % (p, mode, tool, r["error"]))
                    continue
                ends = "" if r.get("step_end_ms") is None else "%.2f / %s" % (
                    r["step_end_ms"], _fmt(r.get("write_ms"), "%.2f"))
                writer = "" if r.get("writer_cpu_ms") is None else "%.2f, %.0f MB" % (
                    r["writer_cpu_ms"], r.get("writer_rss_mb") or 0.0)
                lines.append("| %s | %s | %s | %.2f× (%.2f–%.2f) | %s | %.0f | %.1f | %.0f MB | %s | %s | %s | %s |" % (
                    p, mode, tool, r["ratio"], r["ratio_min"], r["ratio_max"], _fmt(r["us_per_record"], "%.0f"),
                    r["records_per_step"], r["files_per_step"], r["rss_growth_mb"],
                    _fmt(r.get("mb_per_step"), "%.1f"), _fmt(r.get("write_mb_s"), "%.0f"), ends, writer))
    return lines


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "uptime unavailable"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", choices=tuple(PRESETS) + tuple(PRESET_CHOICES), default="both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None,
                        help="measured pairs a round (default 5 on the default preset, 30 on tiny; tensor half)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: " + ", ".join(MODES))
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, 2 steps (tiny: 5)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per worker process")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--memory-budget", default="",
                        help="probe-tui's output.memory_budget, or several (comma-separated: one run each)")
    parser.add_argument("--blocks", action="store_true",
                        help="alternate blocks of --steps steps (a writer thread drained inside its block) instead of "
                             "single steps: a writer thread's work then counts against the captured steps")
    parser.add_argument("--async-dump", default="off",
                        help="probe-tui's async_dump: off, on, or off,on (one run each)")
    parser.add_argument("--no-control", action="store_true",
                        help="skip the uninstrumented control run per preset (peak memory's noise floor)")
    parser.add_argument("--worker", choices=TOOLS + (CONTROL,), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error("--modes: unknown mode %r" % unknown[0])
    if args.worker:
        sys.path.insert(0, str(ROOT))
        out = worker(args.worker, args.preset, modes[0], args.rounds, args.steps or 1, args.warmup,
                     args.memory_budget or None, args.async_dump == "on", args.blocks)
        print(MARK + json.dumps(out), flush=True)
        return 0
    rounds = 1 if args.quick else args.rounds
    presets = PRESET_CHOICES.get(args.preset, [args.preset])
    ms_python, why = msprobe_python()
    if ms_python is None:
        print("msprobe: skipped (%s)" % why, flush=True)
    pythons = {"msprobe": ms_python, "probe-tui": sys.executable}
    budgets: List[Optional[str]] = [b.strip() for b in args.memory_budget.split(",") if b.strip()] or [None]
    asyncs = [a.strip() == "on" for a in args.async_dump.split(",") if a.strip()] or [False]
    variants = [(b, a) for b in budgets for a in asyncs]
    print("load before: " + uptime(), flush=True)
    disk = [disk_write_mb_s(tempfile.gettempdir())]
    print("disk (%s): %.0f MB/s to the page cache, %.0f MB/s through fdatasync" % (
        (tempfile.gettempdir(),) + disk[0]), flush=True)
    results: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]] = {}
    controls: Dict[str, Dict[str, Any]] = {}
    for preset in presets:
        for mode in modes:
            steps = args.steps or ((2 if preset == "default" else 5) if args.quick else
                                   (5 if preset == "default" else 30 if preset == "tiny" else 20))
            if MODES[mode][0] == "tensor" and not args.steps:
                steps = max(2, steps // 2)
            for tool, (budget, async_dump) in [(t, v) for t in TOOLS
                                               for v in (variants if t == "probe-tui" else [(None, False)])]:
                python = pythons[tool]
                if python is None:
                    continue
                label = tool
                if tool == "probe-tui" and (budget, async_dump) != variants[0]:
                    label += "".join([", memory_budget %s" % budget if len(budgets) > 1 else "",
                                      ", async_dump %s" % ("on" if async_dump else "off") if len(asyncs) > 1 else ""])
                got = run_worker(python, tool, preset, mode, rounds, steps, args.warmup, args.timeout, budget,
                                 async_dump, args.blocks)
                results.setdefault(preset, {}).setdefault(mode, {})[label] = got
                print("  %s %s %s: %s" % (preset, mode, label, got.get("error") or "%.2f×, %s µs/record" % (
                    got["ratio"], _fmt(got["us_per_record"], "%.0f"))), flush=True)
        if not args.no_control:  # the same loop with no tool, as many steps as a statistics mode
            steps = args.steps or ((2 if preset == "default" else 5) if args.quick else
                                   (5 if preset == "default" else 30 if preset == "tiny" else 20))
            controls[preset] = run_worker(sys.executable, CONTROL, preset, "statistics L1", rounds, steps,
                                          args.warmup, args.timeout)
    print()
    print("\n".join(format_table(results, presets, modes)))
    print()
    print("\n".join(format_details(results, presets, modes)))
    print("baseline step: " + ", ".join(
        "%s %.1f ms" % (p, statistics.median(r["base_ms"] for m in results.get(p, {}).values() for r in m.values()
                                             if "base_ms" in r))
        for p in presets if any("base_ms" in r for m in results.get(p, {}).values() for r in m.values())))
    if controls:
        print("peak RSS growth of the uninstrumented control (the same loop, no tool; the figures' noise floor): "
              + ", ".join("%s %s" % (p, c.get("error") or "%.0f MB (warm-up %d pairs)" % (
                  c["rss_growth_mb"], c["warm_pairs"])) for p, c in controls.items()))
    disk.append(disk_write_mb_s(tempfile.gettempdir()))
    print("disk after: %.0f MB/s to the page cache, %.0f MB/s through fdatasync" % disk[-1])
    sync_mb_s = statistics.median([d[1] for d in disk])
    for p in presets:
        for mode in modes:
            for tool, r in results.get(p, {}).get(mode, {}).items():
                if MODES[mode][0] == "tensor" and r.get("write_mb_s"):
                    print("%s %s %s: the dump wrote %.0f MB/s of added time, %.0f %% of the disk's %.0f MB/s "
                          "(fdatasync)" % (p, mode, tool, r["write_mb_s"], 100 * r["write_mb_s"] / sync_mb_s,
                                           sync_mb_s))
    print("load after: " + uptime(), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

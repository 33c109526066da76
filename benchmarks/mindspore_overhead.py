"""MindSpore capture overhead on the MindSpore demo: step time against the same model uninstrumented, interleaved.

    python benchmarks/mindspore_overhead.py [--preset default|tiny|both] [--rounds 3] [--steps 4] [--json FILE]

The method of ``benchmarks/dump_overhead.py`` and of msprobe's MindSpore baseline (docs/reference/msprobe-baselines.md):
PyNative on the CPU, ``runtime_num_threads=1`` and ``OMP_NUM_THREADS=1``; one step = ``start(model)`` ->
``value_and_grad`` (forward + loss + backward) -> optimizer -> ``stop()`` -> ``step()`` -> read the loss. Each
measured step of an arm is followed by an uninstrumented step of the same model and optimizer, so drift and
machine noise hit both alike; the ratio is the median over rounds of (median arm step / median plain step),
after warm-up steps (the first compiles the jit optimizer).

Arms: imported but no session, statistics L0 / L1 / mix, statistics L1 with ``summary_mode: hash``.
msprobe 26.2.0 on this machine, norm replaced by ``ops.norm`` (it fails as shipped): L0 4.08x, L1 9.16x,
mix 13.05x, ~31 ms a record. Target: overhead (ratio - 1) at most a third of msprobe's (L1 <= 3.72x).
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mindspore as ms  # noqa: E402
from mindspore import Tensor  # noqa: E402

from benchmarks._workload import STATISTICS_ARMS, arm_rounds, each_arm, timed  # noqa: E402
from engines.adapters.mindspore.demo import build_model, ensure_pynative, loss_function, make_optimizer  # noqa: E402
from engines.adapters.mindspore.session import MindSporeCaptureSession  # noqa: E402
from engines.capture.options import CaptureOptions  # noqa: E402
from engines.capture.sink import dump_sink_factory  # noqa: E402
from engines.capture.summary import CaptureSummary  # noqa: E402
from engines.demo.data import batches  # noqa: E402
from engines.demo.knobs import resolve_knobs  # noqa: E402

ARMS = dict(STATISTICS_ARMS)
MSPROBE = {"default": {"statistics L0": 4.08, "statistics L1": 9.16, "statistics mix": 13.05}}
# The PyTorch capture on the same workload, for the side-by-side line (benchmarks/dump_overhead.py, docs/CAPTURE.md).
PYTORCH_FIGURES_NOTE = "PyTorch figures: python benchmarks/dump_overhead.py --preset default"


def _single_thread() -> None:
    try:
        ms.set_context(runtime_num_threads=1)
    except Exception:
        pass


class Workload:
    """The MindSpore demo's model, optimizer and one batch; ``step()`` is one training step."""

    def __init__(self, preset: str) -> None:
        ensure_pynative()
        self.knobs = resolve_knobs({"preset": preset, "steps": 1})
        ms.set_seed(self.knobs.seed)
        self.model = build_model(self.knobs)
        self.model.set_train(True)
        self.opt = make_optimizer(self.model, self.knobs)
        self.grad_fn = ms.value_and_grad(loss_function(self.model, self.knobs.vocab, False), None,
                                         self.opt.parameters)
        self.tokens, self.targets = [(Tensor(x), Tensor(y)) for x, y in batches(self.knobs)][0]

    def step(self) -> float:
        loss, grads = self.grad_fn(self.tokens, self.targets)
        self.opt(grads)
        return float(loss.asnumpy())


def run_arm(work: Workload, arm: str, rounds: int, steps: int, warmup: int, root: Path):
    options = ARMS[arm]

    def open_round(r: int):
        folder = root / ("%s-%d" % (arm.replace(" ", "_"), r))
        summary = CaptureSummary()
        if options is None:
            return work.step, lambda: None, summary, folder
        opts = CaptureOptions(**options)
        sinks = dump_sink_factory(lambda rank: folder / ("rank%d" % rank), opts, {"framework": "mindspore"}, summary)
        session = MindSporeCaptureSession(opts, sinks, summary=summary, rank=0)

        def captured():
            session.start(work.model)
            loss, grads = work.grad_fn(work.tokens, work.targets)
            work.opt(grads)
            session.stop()
            session.step_end()
            return float(loss.asnumpy())

        return captured, session.close, summary, folder

    out = arm_rounds(work, open_round, rounds, steps, warmup)
    out["ms_per_record"] = out.pop("s_per_record") * 1e3
    return out


def run_preset(preset: str, arms, rounds: int, steps: int, warmup: int):
    work = Workload(preset)
    for _ in range(2):
        work.step()  # compiles the jit optimizer
    out = {"baseline_step_ms": statistics.median(timed(work.step)[0] for _ in range(3)) * 1e3}
    print("%-8s baseline %.0f ms a step" % (preset, out["baseline_step_ms"]), flush=True)
    out.update(each_arm(arms, lambda arm, root: run_arm(work, arm, rounds, steps, warmup, root),
                        lambda arm, r: _print_row(preset, arm, r), "probe-tui-ms-overhead-"))
    return out


def _print_row(preset: str, arm: str, r) -> None:
    ms_ratio = MSPROBE.get(preset, {}).get(arm)
    target = ("   target <= %.2fx (msprobe %.2fx)" % (1 + (ms_ratio - 1) / 3, ms_ratio)) if ms_ratio else ""
    print("%-8s %-19s %6.2fx (%5.2f-%5.2f)  cpu %5.2fx  %5.0f rec  %8.1f KB  %6.2f ms/rec%s"
          % (preset, arm, r["ratio"], r["ratio_min"], r["ratio_max"], r["cpu_ratio"], r["records_per_step"],
             r["bytes_per_step"] / 1024.0, r["ms_per_record"], target), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=("default", "tiny", "both"), default="default")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--arms", nargs="*", default=list(ARMS), help="subset of: %s" % ", ".join(ARMS))
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    bad = [a for a in args.arms if a not in ARMS]
    if bad:
        p.error("--arms: unknown arm %r" % bad[0])
    _single_thread()
    presets = ("tiny", "default") if args.preset == "both" else (args.preset,)
    results = {"mindspore": ms.__version__, "threads": os.environ.get("OMP_NUM_THREADS")}
    for preset in presets:
        results[preset] = run_preset(preset, args.arms, args.rounds, args.steps, args.warmup)
    print(PYTORCH_FIGURES_NOTE)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

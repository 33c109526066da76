"""Online check overhead on the MindSpore demo (fp32, injected low-precision softmax): step time against the same
model uninstrumented, interleaved step by step (docs/ACC_CHECK.md, "Online check on MindSpore").

    python benchmarks/online_check_overhead_mindspore.py [--preset tiny|default] [--rounds 3] [--steps 4]

The method of ``benchmarks/mindspore_overhead.py`` (PyNative on the CPU, one runtime thread, OMP_NUM_THREADS=1;
one step = ``start(model)`` -> ``value_and_grad`` -> optimizer -> ``stop()`` -> ``step_end()``), with the arms of
``benchmarks/online_check_overhead.py``: the capture session alone (statistics L1, nothing written), a one-API
list (``naive_softmax``) and the whole network. Prints the median wall and CPU-time ratios, the calls judged per
step and the machine load.
"""

import argparse
import os
import statistics
import sys
from functools import partial
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mindspore as ms  # noqa: E402
from mindspore import Tensor  # noqa: E402

from benchmarks._workload import interleaved  # noqa: E402
from engines.acc_check import online as oc  # noqa: E402
from engines.adapters.mindspore.demo import build_model, ensure_pynative, loss_function, make_optimizer  # noqa: E402
from engines.adapters.mindspore.session import MindSporeCaptureSession  # noqa: E402
from engines.capture.options import CaptureOptions  # noqa: E402
from engines.demo.data import batches  # noqa: E402
from engines.demo.knobs import resolve_knobs  # noqa: E402
from engines.frameworks import adapter_module  # noqa: E402

ARMS = {
    "capture session only (no online check)": None,
    "online check, one API (naive_softmax)": ["naive_softmax"],
    "online check, whole network": [],
}


class Workload:
    """The faulty MindSpore demo's model, optimizer and one batch; ``step()`` is one uninstrumented step."""

    def __init__(self, preset: str) -> None:
        ensure_pynative()
        self.knobs = resolve_knobs({"preset": preset, "steps": 1, "faults": {"lowp_softmax": {"layer": 1}}})
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


def _count(judged: list, step: int, rows: list) -> None:
    judged.append(len({r["name"] for r in rows}))


def run_arm(work: Workload, patterns, rounds: int, steps: int, warmup: int):
    adapter = partial(adapter_module, "mindspore")
    ratios, cpu, calls = [], [], []
    for _ in range(rounds):
        session = MindSporeCaptureSession(CaptureOptions(level="L1"), None, rank=0)
        judged: list = []
        if patterns is not None:
            oc.build(adapter, session, patterns, partial(_count, judged))

        def captured(session: MindSporeCaptureSession = session) -> float:
            session.start(work.model)
            loss, grads = work.grad_fn(work.tokens, work.targets)
            work.opt(grads)
            session.stop()
            session.step_end()
            return float(loss.asnumpy())

        got = interleaved(work, captured, steps, warmup)
        session.close()
        ratios.append(got["ratio"])
        cpu.append(got["cpu_ratio"])
        calls.append(statistics.mean(judged) if judged else 0)
    return {"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)],
            "cpu_ratio": statistics.median(cpu), "calls_per_step": statistics.median(calls)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", choices=("default", "tiny"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    try:
        ms.set_context(runtime_num_threads=1)
    except Exception:
        pass
    work = Workload(args.preset)
    for _ in range(2):
        work.step()  # compiles the jit optimizer
    for name, patterns in ARMS.items():
        got = run_arm(work, patterns, args.rounds, args.steps, args.warmup)
        load = os.getloadavg()
        print("%-42s %6.2fx (%.2f-%.2f)  cpu %5.2fx  calls judged/step %5.0f  load %.2f %.2f %.2f" % (
            name, got["ratio"], got["spread"][0], got["spread"][1], got["cpu_ratio"], got["calls_per_step"], *load),
            flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Overhead of graph-mode capture (MindSpore L2, docs/MINDSPORE.md "Graph mode") against the same run uninstrumented.

    PYTHONPATH=. python benchmarks/mindspore_graph_overhead.py [--rounds 3] [--steps 6] [--warmup 2]
                                                                 [--preset tiny] [--arms statistics tensor]

The target: the MindSpore demo in GRAPH_MODE with ``TrainOneStepCell`` + SGD (this file run as a script with
``--target``), printing each step's seconds. The kernel dump is set for the whole process when the first graph
compiles, so the arms are separate processes, not interleaved steps: each round runs the plain target and each
arm under ``probe-tui run`` (level L2), the order turned round every round so drift hits the arms alike. Figures:

- steady step: the median step time after ``--warmup`` steps (the first compiles the graph), its ratio to the
  plain run's of the same round, median (min-max) over rounds: the cost of the dump itself;
- process: the whole process's wall seconds (probe-tui's start, the dump, the conversion into our store and the
  raw files' removal included), and its ratio;
- load: ``os.getloadavg()`` before and after (the figures are only as steady as the machine).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("statistics", "tensor")


def target(preset: str, steps: int) -> None:
    """The measured training (run in its own process)."""
    import mindspore as ms
    from mindspore import Tensor, nn, ops

    from engines.adapters.mindspore import demo_model
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs

    ms.set_context(mode=ms.GRAPH_MODE)
    knobs = resolve_knobs({"preset": preset, "steps": steps})
    ms.set_seed(knobs.seed)
    model = demo_model.build_model(knobs)

    class WithLoss(nn.Cell):
        def __init__(self, net: Any, vocab: int) -> None:
            super().__init__()
            self.net, self.vocab = net, vocab

        def construct(self, x: Any, y: Any) -> Any:
            return ops.cross_entropy(self.net(x).view(-1, self.vocab), y.view(-1))

    step = nn.TrainOneStepCell(WithLoss(model, knobs.vocab), nn.SGD(model.trainable_params(), learning_rate=0.01))
    step.set_train(True)
    times = []
    for x, y in batches(knobs):
        t = time.perf_counter()
        float(step(Tensor(x), Tensor(y)).asnumpy())
        times.append(time.perf_counter() - t)
    print("STEPS " + json.dumps(times))


def _run(arm: str, preset: str, steps: int, work: Path) -> Dict[str, Any]:
    args = ["--target", preset, str(steps)]
    if arm == "plain":
        cmd = [sys.executable, __file__] + args
    else:
        config = {"task": arm, "level": "L2", "dump_path": str(work / "dump"),
                  "target": {"script": str(Path(__file__).resolve()), "args": args}}
        (work / "cfg.json").write_text(json.dumps(config))
        cmd = [sys.executable, "-m", "probe_tui", "run", str(work / "cfg.json")]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=str(work),
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    wall = time.perf_counter() - t
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("STEPS ")]
    if done.returncode != 0 or not lines:
        raise SystemExit("%s failed (exit %d): %s" % (arm, done.returncode, (done.stderr or done.stdout)[-500:]))
    return {"steps": json.loads(lines[-1][6:]), "wall": wall}


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6, help="measured steps a process, after the warm-up")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--arms", nargs="*", default=["statistics"], choices=ARMS)
    p.add_argument("--json", help="write the figures to this file")
    a = p.parse_args(argv)
    total = a.warmup + a.steps
    load_before = os.getloadavg()
    per_arm: Dict[str, Dict[str, List[float]]] = {arm: {"step": [], "wall": [], "step_ratio": [], "wall_ratio": []}
                                                  for arm in ["plain"] + a.arms}
    for r in range(a.rounds):
        order = ["plain"] + a.arms
        if r % 2:
            order.reverse()
        got = {}
        for arm in order:
            with tempfile.TemporaryDirectory(prefix="ms_graph_overhead_") as work:
                got[arm] = _run(arm, a.preset, total, Path(work))
        plain_step = statistics.median(got["plain"]["steps"][a.warmup:])
        for arm, res in got.items():
            step = statistics.median(res["steps"][a.warmup:])
            per_arm[arm]["step"].append(step)
            per_arm[arm]["wall"].append(res["wall"])
            per_arm[arm]["step_ratio"].append(step / plain_step)
            per_arm[arm]["wall_ratio"].append(res["wall"] / got["plain"]["wall"])
        print("round %d: " % r + ", ".join("%s %.4f s/step, %.1f s process" % (
            arm, per_arm[arm]["step"][-1], per_arm[arm]["wall"][-1]) for arm in ["plain"] + a.arms), flush=True)
    load_after = os.getloadavg()
    figures: Dict[str, Any] = {"preset": a.preset, "rounds": a.rounds, "steps": a.steps, "warmup": a.warmup,
                               "load_before": load_before, "load_after": load_after, "arms": {}}
    for arm, f in per_arm.items():
        row = {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in f.items()}
        figures["arms"][arm] = row
        print("%-10s steady step %.4f s (ratio %.2fx, %.2f-%.2f)   process %.1f s (ratio %.2fx, %.2f-%.2f)" % (
            arm, row["step"]["median"], row["step_ratio"]["median"], row["step_ratio"]["min"],
            row["step_ratio"]["max"], row["wall"]["median"], row["wall_ratio"]["median"], row["wall_ratio"]["min"],
            row["wall_ratio"]["max"]))
    print("load average before %s, after %s" % (
        " ".join("%.2f" % x for x in load_before), " ".join("%.2f" % x for x in load_after)))
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--target"]:
        target(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())

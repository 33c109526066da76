"""Which MindSpore facility captures GRAPH_MODE execution on the CPU, and at what cost (docs/MINDSPORE.md "Graph mode").

    PYTHONPATH=. python benchmarks/mindspore_graph_facilities.py            # every arm, one subprocess each
    PYTHONPATH=. python benchmarks/mindspore_graph_facilities.py ARM OUTDIR # one arm (what the driver runs)

Arms: the tiny demo in GRAPH_MODE with ``TrainOneStepCell`` + SGD, 3 steps (PRESET, STEPS override): ``plain``;
``e2e-tensor`` / ``e2e-statistic`` / ``e2e-tensor-overflow`` (MINDSPORE_DUMP_CONFIG, op_debug_mode 3 for overflow);
``tensordump`` (``ops.TensorDump`` of the logits); ``hook`` (a forward hook on ``blocks.0``); ``*-jit``: PyNative
with ``blocks.1.mlp`` under ``@jit``. Prints one JSON line per arm: losses, seconds a step, files and bytes written.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

ARMS = ("plain", "e2e-tensor", "e2e-statistic", "e2e-tensor-overflow", "tensordump", "hook", "plain-jit",
        "e2e-tensor-jit")


def _dump_config(arm: str, out: str) -> None:
    saved = arm.split("-")[1]  # tensor | statistic
    cfg = {"common_dump_settings": {"op_debug_mode": 3 if "overflow" in arm else 0, "dump_mode": 0,
                                    "path": os.path.abspath(os.path.join(out, "dump")), "net_name": "Demo",
                                    "iteration": "all", "saved_data": saved, "input_output": 0, "kernels": [],
                                    "support_device": [0, 1, 2, 3, 4, 5, 6, 7]},
           "e2e_dump_settings": {"enable": True, "trans_flag": True}}
    path = os.path.join(out, "dump.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    os.environ["MINDSPORE_DUMP_CONFIG"] = os.path.abspath(path)


def run_arm(arm: str, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    if arm.startswith("e2e"):
        _dump_config(arm, out)
    import mindspore as ms
    from mindspore import Tensor, nn, ops

    from engines.adapters.mindspore import demo_model
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs

    ms.set_context(mode=ms.PYNATIVE_MODE if "jit" in arm else ms.GRAPH_MODE)
    knobs = resolve_knobs({"preset": os.environ.get("PRESET", "tiny"), "steps": int(os.environ.get("STEPS", "3"))})
    ms.set_seed(knobs.seed)
    model = demo_model.build_model(knobs)

    class WithLoss(nn.Cell):
        def __init__(self, net, vocab):
            super().__init__()
            self.net, self.vocab = net, vocab
            self.dump = ops.TensorDump() if arm == "tensordump" else None

        def construct(self, x, y):
            logits = self.net(x)
            if self.dump is not None:
                self.dump(out + "/logits", logits)
            return ops.cross_entropy(logits.view(-1, self.vocab), y.view(-1))

    if "jit" in arm:
        mlp = model.blocks[1].mlp
        mlp.construct = ms.jit(type(mlp).construct).__get__(mlp)
    seen = []
    if arm == "hook":
        model.blocks[0].register_forward_hook(lambda c, a, o: seen.append(o))
    step = nn.TrainOneStepCell(WithLoss(model, knobs.vocab), nn.SGD(model.trainable_params(), learning_rate=0.01))
    step.set_train(True)
    times, losses = [], []
    for x, y in batches(knobs):
        t = time.perf_counter()
        losses.append(float(step(Tensor(x), Tensor(y)).asnumpy()))
        times.append(round(time.perf_counter() - t, 4))
    walk = [(d, f) for d, _, fs in os.walk(out) for f in fs]
    print(json.dumps({"arm": arm, "losses": losses, "step_s": times, "files": len(walk),
                      "bytes": sum(os.path.getsize(os.path.join(d, f)) for d, f in walk), "hook_calls": len(seen)}))


def main() -> None:
    for arm in ARMS:
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run([sys.executable, __file__, arm, out], capture_output=True, text=True, timeout=600)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            errors = [ln for ln in done.stderr.splitlines() if "Error" in ln or "Unsupported" in ln]
            print(lines[-1] if lines else json.dumps({"arm": arm, "failed": (errors or ["?"])[-1][:200]}))


if __name__ == "__main__":
    if len(sys.argv) == 3:
        run_arm(sys.argv[1], sys.argv[2])
    else:
        main()

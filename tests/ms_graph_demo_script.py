"""The MindSpore demo trained with TrainOneStepCell: argv[1] graph (GRAPH_MODE), jit (PyNative, blocks.1.mlp @jit),
jitfn (PyNative, a @jit train-step function calling the TrainOneStepCell) or jitcell (PyNative, ``ms.jit(step)``
called directly);
argv[2], when given, a demo fault injected in block 1 from step 0 (``fp16_overflow``: docs/OVERFLOW.md;
``wrong_eps``, ``lowp_softmax``: engines/demo/faults.py). Step 0 starts from the demo's initial weights on its
first batch, as the PyNative demo's step 0 does (the optimizer differs: SGD here), so the two compare there."""
import sys

import mindspore as ms
from mindspore import Tensor, nn, ops

from engines.adapters.mindspore import demo_model
from engines.demo.data import batches
from engines.demo.knobs import resolve_knobs

mode = sys.argv[1]
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
demo = {"preset": "tiny", "steps": 2}
if sys.argv[2:]:
    demo["faults"] = {sys.argv[2]: {"layer": 1} if sys.argv[2] == "wrong_eps" else {"layer": 1, "from_step": 0}}
knobs = resolve_knobs(demo)
ms.set_seed(knobs.seed)
model = demo_model.build_model(knobs)
if mode in ("jitfn", "jitcell"):  # compiled from PyNative: the attention's graph-mode transpose and split
    for b in model.blocks:
        b.attn.graph = True
if mode == "jit":
    block = model.blocks[1].mlp
    block.construct = ms.jit(type(block).construct).__get__(block)


class WithLoss(nn.Cell):
    def __init__(self, net, vocab):
        super().__init__()
        self.net = net
        self.vocab = vocab

    def construct(self, x, y):
        return ops.cross_entropy(self.net(x).view(-1, self.vocab), y.view(-1))


step = nn.TrainOneStepCell(WithLoss(model, knobs.vocab), nn.SGD(model.trainable_params(), learning_rate=0.01))
step.set_train(True)
run = step
if mode == "jitfn":
    @ms.jit
    def train_step(x, y):
        return step(x, y)

    run = train_step
elif mode == "jitcell":
    run = ms.jit(step)
for x, y in batches(knobs):
    print("loss %r" % float(run(Tensor(x), Tensor(y)).asnumpy()))

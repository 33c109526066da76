"""The MindSpore demo trained with TrainOneStepCell: argv[1] graph (GRAPH_MODE) or jit (PyNative, blocks.1.mlp @jit);
argv[2] ``fp16_overflow`` injects the demo's float16 overflow in block 1 from step 0 (docs/OVERFLOW.md)."""
import sys

import mindspore as ms
from mindspore import Tensor, nn, ops

from engines.adapters.mindspore import demo_model
from engines.demo.data import batches
from engines.demo.knobs import resolve_knobs

mode = sys.argv[1]
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
demo = {"preset": "tiny", "steps": 2}
if sys.argv[2:] == ["fp16_overflow"]:
    demo["faults"] = {"fp16_overflow": {"layer": 1, "from_step": 0}}
knobs = resolve_knobs(demo)
ms.set_seed(knobs.seed)
model = demo_model.build_model(knobs)
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
for x, y in batches(knobs):
    print("loss %r" % float(step(Tensor(x), Tensor(y)).asnumpy()))

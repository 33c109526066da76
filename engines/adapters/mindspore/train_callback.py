"""msprobe's ``MsprobeStep(debugger)``: a ``Model.train`` callback that opens a capture step at each training
step's begin and closes it at its end (``start()``, then ``stop()`` and ``step()``), so a script that trains with
MindSpore's high-level ``Model`` needs no loop of its own."""

from typing import Any

from mindspore.train import Callback


class MsprobeStep(Callback):
    """``model.train(epochs, dataset, callbacks=[MsprobeStep(debugger)])``."""

    def __init__(self, debugger: Any) -> None:
        super().__init__()
        self.debugger = debugger

    def on_train_step_begin(self, run_context: Any) -> None:
        self.debugger.start()

    def on_train_step_end(self, run_context: Any) -> None:
        self.debugger.stop()
        self.debugger.step()

"""The three ways to run a MindSpore capture: ``probe-tui --run`` on an unmodified script (framework picked from
its imports), ``PrecisionDebugger`` in the script, and the MindSpore demo; a run that never imports torch; wrappers
that are gone when the session is. Failing hooks and the sample config: tests/test_capture_frameworks.py."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from mindspore import Tensor, mint, nn, ops  # noqa: E402
from test_mindspore_support import TINY, Dump, make_session  # noqa: E402

from tests.dump_support import only_run, write_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

TRAIN_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor, nn, ops
    from mindspore.mint.nn import functional as F

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(8, 16)
            self.fc2 = nn.Dense(16, 4)

        def construct(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    net = Net()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    rng = np.random.default_rng(0)
    data = [(Tensor(rng.standard_normal((5, 8)).astype(np.float32)), Tensor(rng.integers(0, 4, 5)))
            for _ in range(3)]

    def forward(x, y):
        return ops.cross_entropy(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)
    debugger = None
    if len(sys.argv) > 1:  # the in-script variant: the same loop with msprobe's calls
        from probe_tui import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=sys.argv[1])
    for x, y in data:
        if debugger:
            debugger.start(net)
        loss, grads = grad_fn(x, y)
        if debugger:
            debugger.stop()
        opt(grads)
        if debugger:
            debugger.step()
    print("final loss", float(loss.asnumpy()))
    print("frameworks", sorted(m for m in ("torch", "mindspore") if m in sys.modules))
''')




def _python(args, cwd):
    return subprocess.run([sys.executable] + args, cwd=str(cwd), capture_output=True, text=True, timeout=180,
                          env=dict(__import__("os").environ, PYTHONPATH=str(ROOT)))


def test_run_unmodified_script_and_in_script_api_write_the_same_records(tmp_path):
    script = tmp_path / "train_ms.py"
    script.write_text(TRAIN_SCRIPT)
    in_script = write_config(tmp_path, "in_script")  # framework: auto, the script imported MindSpore only
    zero_code = write_config(tmp_path, "zero_code", target={"script": str(script)})  # framework: auto
    done = _python([str(script), str(in_script)], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "frameworks ['mindspore']" in done.stdout  # the in-script API imported no torch
    run = _python(["-c", "import sys\nfrom probe_tui.cli import main\ncode = main(['--run', %r])\n"
                         "print('frameworks', sorted(m for m in ('torch', 'mindspore') if m in sys.modules))\n"
                         "sys.exit(code)" % str(zero_code)], tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "frameworks ['mindspore']" in run.stdout  # --run on a MindSpore script never imports torch
    a_run, b_run = only_run(tmp_path / "in_script"), only_run(tmp_path / "zero_code")
    assert json.loads((b_run / "run.json").read_text())["framework"] == "mindspore"
    a, b = Dump(a_run / "rank0"), Dump(b_run / "rank0")
    assert a.reader.steps() == b.reader.steps() == [0, 1, 2]
    assert a.names() == b.names()
    names = a.names(0)
    assert "Cell.fc1.Dense.forward.0" in names and "Cell.fc1.Dense.parameters_grad.0" in names
    assert "MintFunctional.relu.0.forward" in names and "Functional.cross_entropy.0.backward" in names
    # nn.Dense computes with primitives: captured under their names, inside the cell
    assert a.record("Primitive.MatMul.0.forward")["parent"] == "Cell.fc1.Dense.forward.0"
    ra, rb = a.rows("Cell.fc2.Dense.backward.0", 2), b.rows("Cell.fc2.Dense.backward.0", 2)
    assert ra["input.0"]["norm"] == rb["input.0"]["norm"] > 0


def test_a_pytorch_run_never_imports_mindspore(tmp_path):
    pytest.importorskip("torch")
    cfg = write_config(tmp_path, "pt", level="L0", framework="pytorch", target={"demo": {"preset": "tiny", "steps": 1}})
    run = _python(["-c", "import sys\nfrom probe_tui.cli import main\ncode = main(['--run', %r])\n"
                         "print('frameworks', sorted(m for m in ('torch', 'mindspore') if m in sys.modules))\n"
                         "sys.exit(code)" % str(cfg)], tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "frameworks ['torch']" in run.stdout


def test_stop_and_step_placement_and_class_calls(tmp_path):
    from engines.adapters.mindspore.demo import build_model, loss_function, make_optimizer
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs
    from probe_tui import PrecisionDebugger

    cfg = write_config(tmp_path, "dbg", level="L0", framework="mindspore")
    knobs = resolve_knobs(TINY)
    model = build_model(knobs)
    optimizer = make_optimizer(model, knobs)
    grad_fn = ms.value_and_grad(loss_function(model, knobs.vocab, False), None, optimizer.parameters)
    debugger = PrecisionDebugger(config_path=str(cfg))
    for x, y in batches(knobs):
        PrecisionDebugger.start(model)  # class calls reach the debugger created last, as in msprobe
        loss, grads = grad_fn(Tensor(x), Tensor(y))
        PrecisionDebugger.stop()
        debugger.save("loss", loss)
        optimizer(grads)
        PrecisionDebugger.step()
    summary = debugger.close()
    assert summary["steps_written"] == 2
    dump = Dump(debugger.run_dir / "rank0")
    names = dump.names(1)
    assert "Cell.head.Linear.backward.0" in names and "Cell.head.Linear.parameters_grad.0" in names
    assert "loss.0.debug" in names
    assert dump.rows("loss.0.debug", 1)["value"]["mean"] == pytest.approx(float(loss.asnumpy()))
    assert json.loads((debugger.run_dir / "run.json").read_text())["framework"] == "mindspore"


def test_wrappers_are_installed_only_while_a_session_runs(tmp_path):
    originals = (ops.gelu, mint.add, Tensor.__add__, nn.Cell.__call__, Tensor.masked_fill)
    session = make_session(tmp_path, level="mix")
    x = Tensor(np.ones((2, 3), np.float32))
    session.start()
    assert ops.gelu is not originals[0] and ops.gelu.__wrapped__ is originals[0]
    assert nn.Cell.__call__ is not originals[3]
    y = ops.gelu(x) + x
    session.stop()
    assert (ops.gelu, mint.add, Tensor.__add__, nn.Cell.__call__, Tensor.masked_fill) == originals
    session.step_end()
    session.close()
    dump = Dump(tmp_path / "rank0")
    assert dump.names(0) == ["Functional.gelu.0.forward", "Tensor.add.0.forward"]
    assert float(np.abs(y.asnumpy()).sum()) > 0


def test_jit_graphs_compile_the_originals(tmp_path):
    session = make_session(tmp_path, level="L1")

    @ms.jit
    def double_gelu(x):
        return ops.gelu(x) * 2

    x = Tensor(np.full((2, 2), 0.5, np.float32))
    expected = double_gelu(x).asnumpy()
    session.start()
    got = double_gelu(Tensor(np.full((2, 2), 0.5, np.float32))).asnumpy()
    eager = ops.gelu(x)
    session.step_end()
    session.close()
    assert np.array_equal(got, expected)
    names = Dump(tmp_path / "rank0").names(0)
    assert names == ["Functional.gelu.0.forward"]  # the eager call; the graph ran no Python
    assert eager.shape == (2, 2)

"""The shared filters on a MindSpore session (list, scope, data_mode, the API allow/deny lists), two sessions in
one process, and collectives (with stand-ins: no process group here)."""

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from mindspore import Tensor, mint, ops  # noqa: E402
from test_mindspore_support import Dump, make_session  # noqa: E402


def _run(tmp_path, **options):
    session = make_session(tmp_path, level="L1", **options)
    w = ms.Parameter(Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)), name="w")
    x = Tensor(np.ones((2, 3), np.float32))

    def forward(x):
        h = mint.matmul(x, w)
        return ops.gelu(h).sum()

    session.start()
    ms.value_and_grad(forward, None, [w])(x)
    session.stop()
    session.step_end()
    session.close()
    return Dump(tmp_path / "rank0")


def test_list_keeps_names_containing_an_entry(tmp_path):
    names = _run(tmp_path, list_patterns=("gelu",)).names(0)
    assert names == ["Functional.gelu.0.forward", "Functional.gelu.0.backward"]


def test_scope_keeps_the_calls_between_two_names(tmp_path):
    names = _run(tmp_path, scope=("Functional.gelu.0.forward", "Functional.gelu.0.backward")).names(0)
    assert names == ["Functional.gelu.0.forward", "Tensor.sum.0.forward", "Tensor.sum.0.backward",
                     "Functional.gelu.0.backward"]


def test_data_mode_forward_input_writes_only_forward_inputs(tmp_path):
    dump = _run(tmp_path, data_mode=("forward", "input"))
    assert all(n.endswith(".forward") for n in dump.names(0))
    assert set(dump.rows("Mint.matmul.0.forward")) == {"input.0", "input.1"}


def test_apis_deny_leaves_an_api_out(tmp_path):
    names = _run(tmp_path, api_deny=("Tensor.",)).names(0)
    assert names == ["Mint.matmul.0.forward", "Functional.gelu.0.forward", "Functional.gelu.0.backward",
                     "Mint.matmul.0.backward"]


def test_a_second_session_records_nothing_and_leaves_the_first_alone(tmp_path):
    first = make_session(tmp_path / "a", level="L1")
    second = make_session(tmp_path / "b", level="L1")
    x = Tensor(np.ones((2,), np.float32))
    first.start()
    second.start()
    second.stop()
    y = x * 2.0  # still recorded by the first session
    first.step_end()
    first.close()
    second.close()
    assert Dump(tmp_path / "a" / "rank0").names(0) == ["Tensor.mul.0.forward"]
    assert any("another MindSpore capture session" in n for n in second.summary.notes)
    assert float(y.asnumpy()[0]) == 2.0


def test_collectives_are_named_and_recorded_with_their_results(tmp_path, monkeypatch):
    """A stand-in for mindspore.communication.comm_func.all_reduce (no process group here): named Distributed,
    its in-place result read from the arguments after the call."""
    import mindspore.communication.comm_func as comm_func

    from engines.adapters.mindspore import api_capture

    def all_reduce(tensor, op="sum", group=None):
        tensor.assign_value(tensor * 2.0)
        return tensor, None

    monkeypatch.setattr(comm_func, "all_reduce", all_reduce)
    monkeypatch.setattr(api_capture, "_WRAPPERS", None)  # a fresh table that sees the stand-in
    session = make_session(tmp_path, level="L1")
    x = Tensor(np.ones((3,), np.float32))
    session.start()
    comm_func.all_reduce(x, op="max")
    session.step_end()
    session.close()
    dump = Dump(tmp_path / "rank0")
    assert dump.names(0) == ["Distributed.all_reduce.0.forward"]
    rows = dump.rows("Distributed.all_reduce.0.forward")
    assert rows["input.0"]["max"] == 1.0 and rows["output.0"]["max"] == 2.0
    # a keyword argument other than its default is kept, with the default beside it (docs/CAPTURE.md "Arguments")
    assert '"kwargs":{"op":"max"},"defaults":{"op":"sum"}' in dump.record("Distributed.all_reduce.0.forward")["args"]


def test_a_collective_that_returns_nothing_records_its_arguments_after_the_call(tmp_path, monkeypatch):
    import mindspore.mint.distributed as dist

    from engines.adapters.mindspore import api_capture

    def all_reduce(tensor, op="sum", group=None, async_op=False):
        tensor.assign_value(tensor * 3.0)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(api_capture, "_WRAPPERS", None)
    session = make_session(tmp_path, level="L1")
    x = Tensor(np.ones((3,), np.float32))
    session.start()
    dist.all_reduce(x)
    session.step_end()
    session.close()
    rows = Dump(tmp_path / "rank0").rows("MintDistributed.all_reduce.0.forward")
    assert set(rows) == {"input.0", "output.0"}
    assert rows["input.0"]["max"] == 1.0 and rows["output.0"]["max"] == 3.0

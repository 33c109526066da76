"""The shared filters on a MindSpore session: list, scope, data_mode and the API allow/deny lists."""

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

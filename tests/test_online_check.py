"""The online check (docs/ACC_CHECK.md, "Online check"): a statistics/tensor run re-runs the selected API calls on
the CPU reference as it trains, end to end on the demo."""

import pytest

torch = pytest.importorskip("torch")

from engines.acc_check import online as oc  # noqa: E402
from schemas import load_config  # noqa: E402
from tests.online_support import checked_rows, run_collecting  # noqa: E402
from tests.wrong_kernels import SlightlyWrongKernel  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LOWP = {"lowp_softmax": {"layer": 1}}


def _run(folder, faults=None, online=None, task="statistics", steps=2, dtype="fp32"):
    demo = {"preset": "tiny", "steps": steps, "dtype": dtype}
    if faults:
        demo["faults"] = faults
    section = {} if online is None else {"online_check": online}
    return run_collecting({"task": task, "dump_path": str(folder), "target": {"demo": demo}, "level": "L1",
                           task: section})


_rows = checked_rows


def test_injected_softmax_is_the_only_failing_api_and_training_is_unchanged(tmp_path):
    plain_summary, plain, _ = _run(tmp_path / "plain", LOWP)
    summary, losses, messages = _run(tmp_path / "online", LOWP, {"enabled": True})
    assert losses == plain  # bit-identical: the re-runs touch neither the real tensors nor the RNG
    assert (summary["records"], summary["tensor_rows"]) == (plain_summary["records"], plain_summary["tensor_rows"])
    online = summary["online_check"]
    assert list(online["failing"]) == ["Demo.naive_softmax"]
    assert summary["online_failing_apis"] == 1 and summary["online_checked_calls"] > 100
    assert any("Demo.naive_softmax failed on the reference" in m for m in messages)  # reported live
    rows = _rows(tmp_path / "online")
    errors = {r["api"] for r in rows if r["status"] == "error"}
    assert errors == {"Demo.naive_softmax"}
    assert {r["step"] for r in rows} == {0, 1}
    assert "Functional.linear" in {r["api"] for r in rows}
    assert online["not_checked"]["Functional.dropout"].startswith("random op")


def test_fp32_demo_has_no_failing_api(tmp_path):
    summary, _, _ = _run(tmp_path / "d", online={"enabled": True}, steps=1)
    assert summary["online_check"]["failing"] == {}
    assert summary["online_checked_calls"] > 100
    assert {r["status"] for r in _rows(tmp_path / "d")} <= {"pass", "warning"}


def test_bf16_autocast_demo_has_no_failing_api(tmp_path):
    # an autocast linear fed a bfloat16 activation and a float32 weight: its kernel saw the weight rounded too
    summary, _, _ = _run(tmp_path / "d", online={"enabled": True}, steps=1, dtype="bf16")
    assert summary["online_check"]["failing"] == {}
    rows = _rows(tmp_path / "d")
    assert {r["bench_dtype"] for r in rows if r["api"] == "Functional.linear"} == {"torch.float32"}


def test_api_list_checks_only_the_listed_apis(tmp_path):
    summary, _, _ = _run(tmp_path / "d", LOWP, {"enabled": True, "api_list": ["naive_softmax"]}, task="tensor",
                         steps=1)
    rows = _rows(tmp_path / "d")
    assert {r["api"] for r in rows} == {"Demo.naive_softmax"}
    assert {r["name"] for r in rows} == {"Demo.naive_softmax.0.forward", "Demo.naive_softmax.0.backward"}
    assert summary["online_checked_calls"] == 1 and summary["online_checked_backward"] == 1
    assert list(summary["online_check"]["failing"]) == ["Demo.naive_softmax"]


def test_a_swapped_kernel_is_the_only_failing_api(tmp_path):
    with SlightlyWrongKernel(torch.ops.aten.gelu.default, torch.float32):
        summary, _, _ = _run(tmp_path / "d", online={"enabled": True}, steps=1)
    assert list(summary["online_check"]["failing"]) == ["Functional.gelu"]


def test_a_wrong_backward_kernel_fails_only_that_apis_backward_and_training_is_unchanged(tmp_path):
    with SlightlyWrongKernel(torch.ops.aten.gelu_backward.default, torch.float32):
        _, plain, _ = _run(tmp_path / "plain", steps=1)
        summary, losses, messages = _run(tmp_path / "d", online={"enabled": True}, steps=1)
    assert losses == plain
    failing_apis = summary["online_check"]["failing"]
    assert list(failing_apis) == ["Functional.gelu"] and failing_apis["Functional.gelu"].endswith(".backward")
    rows = _rows(tmp_path / "d")
    failing = {r["name"] for r in rows if r["status"] == "error"}
    assert failing and failing == {r["name"] for r in rows if r["api"] == "Functional.gelu"
                                   and r["name"].endswith(".backward")}
    assert all(r["status"] != "error" for r in rows if r["name"].endswith(".forward"))
    assert {r["output"] for r in rows if r["name"] in failing} == {"output.0"}  # the gradient w.r.t. its input
    assert any("Functional.gelu failed on the reference" in m for m in messages)


def test_the_backward_of_every_checked_call_is_judged(tmp_path):
    summary, _, _ = _run(tmp_path / "d", online={"enabled": True}, steps=1)
    rows = _rows(tmp_path / "d")
    backward = {r["api"] for r in rows if r["name"].endswith(".backward")}
    assert {"Functional.linear", "Functional.gelu", "Functional.layer_norm"} <= backward
    assert summary["online_checked_backward"] > 50
    linear = [r for r in rows if r["api"] == "Functional.linear" and r["name"].endswith(".backward")]
    assert {r["output"] for r in linear} >= {"output.0", "output.1"}  # the activation's and the weight's


def test_without_the_option_nothing_is_checked(tmp_path):
    summary, _, _ = _run(tmp_path / "d", steps=1)
    assert "online_check" not in summary
    assert not (tmp_path / "d" / "latest" / "rank0" / "online_check.h5").exists()


class _Session:
    """The few session attributes the re-run uses (a failing re-run must not reach training)."""

    def __init__(self):
        self.busy_depth = 0
        self.step = 0
        self.api_capture = self
        self.summary = None

    def backward_open(self):
        return True

    def busy(self):
        import contextlib

        return contextlib.nullcontext()

    def call(self, info, func, args, kwargs, collective=None):
        return func(*args, **kwargs)


class _Info:
    prefix, api, base = "Torch", "weird", "Torch.weird"


def test_a_failing_rerun_is_listed_and_skipped():
    from engines.adapters.torch.online_check import OnlineCall

    def weird(x):
        if x.dtype == torch.float64:
            raise RuntimeError("no float64 kernel")
        return x * 2

    session = _Session()
    processor = oc.OnlineCheckProcessor([])
    processor.session = session
    OnlineCall(session, processor)
    x = torch.ones(3)
    out = session.api_capture.call(_Info(), weird, (x,), {})
    assert torch.equal(out, torch.full((3,), 2.0)) and session.busy_depth == 0
    assert processor.not_checked == {"Torch.weird": "the re-run failed: RuntimeError: no float64 kernel"}
    assert processor.rows == [] and processor.calls == 0


def test_a_failing_backward_rerun_is_listed_and_training_gets_its_gradient():
    from engines.adapters.torch.online_check import OnlineCall

    def weird(x):
        if x.dtype == torch.float64 and torch.is_grad_enabled():
            raise RuntimeError("no float64 backward")
        return x * 2

    session = _Session()
    processor = oc.OnlineCheckProcessor([])
    processor.session = session
    OnlineCall(session, processor)
    x = torch.ones(3, requires_grad=True)
    session.api_capture.call(_Info(), weird, (x,), {}).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0)) and session.busy_depth == 0
    assert processor.not_checked == {"Torch.weird (backward)":
                                     "the backward re-run failed: RuntimeError: no float64 backward"}
    assert [r["name"] for r in processor.rows] == ["Torch.weird.0.forward"] and processor.calls == 1


def test_the_backward_of_a_call_is_judged_against_the_gradients_that_arrived():
    from engines.adapters.torch.online_check import OnlineCall

    session = _Session()
    processor = oc.OnlineCheckProcessor([])
    processor.session = session
    OnlineCall(session, processor)

    class _Mul:
        prefix, api, base = "Torch", "mul", "Torch.mul"

    a = torch.randn(4, 5, requires_grad=True)
    b = torch.randn(4, 5, requires_grad=True)
    out = session.api_capture.call(_Mul(), torch.mul, (a * 1, b), {})  # one input a non-leaf, one a leaf
    (out * torch.arange(20.0).reshape(4, 5)).sum().backward()
    rows = [r for r in processor.rows if r["name"] == "Torch.mul.0.backward"]
    assert [(r["output"], r["status"]) for r in rows] == [("output.0", "pass"), ("output.1", "pass")]
    assert processor.backward_calls == 1


def test_schema_takes_the_section_and_refuses_another_reference():
    job = load_config({"task": "tensor", "tensor": {"online_check": {"enabled": True, "api_list": ["softmax"]}}})
    assert job.tensor.online_check.enabled and job.tensor.online_check.api_list == ["softmax"]
    with pytest.raises(Exception) as err:
        load_config({"task": "statistics", "statistics": {"online_check": {"enabled": True, "reference": "npu"}}})
    assert "online_check.reference" in str(err.value)


def test_a_framework_without_the_online_check_leaves_the_session_unplugged():
    def adapter(name):
        raise ModuleNotFoundError("no module %s" % name)

    session = _Session()
    session.processor = before = object()
    with pytest.raises(ImportError):
        oc.build(adapter, session, [])
    assert session.processor is before and session.api_capture.call == _Session.call.__get__(session)


def test_msprobe_online_run_ut_turns_the_online_check_on():
    warnings = []
    job = load_config({"task": "tensor", "tensor": {"list": ["softmax"], "online_run_ut": True, "host": "1.2.3.4"}},
                      on_warning=lambda path, message: warnings.append(path))
    assert job.tensor.online_check.enabled and job.tensor.online_check.api_list == ["softmax"]
    assert "tensor.online_run_ut" in warnings and "tensor.host" in warnings
    off = load_config({"task": "tensor", "tensor": {"online_run_ut": False}}, on_warning=lambda p, m: None)
    assert not off.tensor.online_check.enabled


def test_in_script_debugger_names_the_injected_softmax(tmp_path):
    from test_debugger_support import torch_demo_in_script, write_config

    from probe_tui import PrecisionDebugger

    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "script"),
              "statistics": {"online_check": {"enabled": True, "api_list": ["softmax"]}}}
    cfg = write_config(tmp_path, "online", config)
    demo = {"preset": "tiny", "steps": 1, "dtype": "fp32", "faults": LOWP}
    _, summary, _ = torch_demo_in_script(demo, lambda: PrecisionDebugger(config_path=str(cfg)))
    assert list(summary["online_check"]["failing"]) == ["Demo.naive_softmax"]
    assert (next((tmp_path / "script").glob("*/rank0")) / "online_check.h5").exists()

"""The online check at the dispatch level (``online_check.level: aten``, docs/ACC_CHECK.md "Online check"): every
aten op of the demo's forward and backward re-run on the CPU reference as it trains, end to end."""

import json

import pytest

torch = pytest.importorskip("torch")

from engines.acc_check import online as oc  # noqa: E402
from engines.runner import JobError, run_job  # noqa: E402
from probe_tui.cli import main  # noqa: E402
from schemas import load_config  # noqa: E402
from tests.online_support import checked_rows, run_collecting  # noqa: E402
from tests.wrong_kernels import SlightlyWrongKernel  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LOWP = {"lowp_softmax": {"layer": 1}}


def _job(folder, faults=None, online=None, steps=1, dtype="fp32", level="L1", framework=None):
    demo = {"preset": "tiny", "steps": steps, "dtype": dtype}
    if faults:
        demo["faults"] = faults
    config = {"task": "statistics", "dump_path": str(folder), "target": {"demo": demo}, "level": level,
              "statistics": {} if online is None else {"online_check": online}}
    if framework:
        config["framework"] = framework
    return config


def _run(folder, faults=None, online=None, **kw):
    return run_collecting(_job(folder, faults, online, **kw))


_rows = checked_rows


def _aten(api_list=()):
    return {"enabled": True, "level": "aten", "api_list": list(api_list)}


def test_a_wrong_aten_gelu_is_the_only_failing_op_and_training_is_unchanged(tmp_path):
    # entered before the run, the wrong kernel sits below the check's mode (pushed while the session runs); the
    # reference, run with every mode disabled, is the right gelu
    with SlightlyWrongKernel(torch.ops.aten.gelu.default, torch.float32):
        plain_summary, plain, _ = _run(tmp_path / "plain", steps=2)
        summary, losses, messages = _run(tmp_path / "d", online=_aten(), steps=2)
    assert losses == plain  # bit-identical: the re-runs see copies only, the RNG state is restored
    # and the capture records what it records without the check (the check's copies are not captured)
    assert (summary["records"], summary["tensor_rows"]) == (plain_summary["records"], plain_summary["tensor_rows"])
    online = summary["online_check"]
    assert online["failing"] == {"Aten.gelu.default": "Aten.gelu.default.0.forward"}
    assert any("Aten.gelu.default failed on the reference" in m for m in messages)
    rows = _rows(tmp_path / "d")
    assert {r["name"] for r in rows if r["status"] == "error"} == \
        {r["name"] for r in rows if r["api"] == "Aten.gelu.default"}
    assert {r["step"] for r in rows} == {0, 1}
    apis = {r["api"] for r in rows}
    # forward and backward ops alike, the backward's own kernels passing
    assert {"Aten.gelu_backward.default", "Aten.mm.default", "Aten.native_layer_norm_backward.default"} <= apis
    assert all(r["status"] == "pass" for r in rows if r["api"] == "Aten.gelu_backward.default")
    assert online["not_checked"]["Aten.view.default"].startswith("view or alias")
    assert online["not_checked"]["Aten.detach.default"].startswith("view or alias")
    assert "Aten._to_copy.default" not in apis


def test_the_check_runs_ops_as_they_would_run_without_it(tmp_path):
    # the same wrong gelu, the check on: the training saw the wrong kernel's values, not the reference's
    with SlightlyWrongKernel(torch.ops.aten.gelu.default, torch.float32):
        _, wrong, _ = _run(tmp_path / "wrong")
    _, right, _ = _run(tmp_path / "right")
    with SlightlyWrongKernel(torch.ops.aten.gelu.default, torch.float32):
        _, checked, _ = _run(tmp_path / "checked", online=_aten(["gelu"]))
    assert checked == wrong and wrong != right
    rows = _rows(tmp_path / "checked")
    assert {r["api"] for r in rows} == {"Aten.gelu.default", "Aten.gelu_backward.default"}


def test_fp32_demo_at_the_aten_level_has_no_failing_op(tmp_path):
    summary, _, _ = _run(tmp_path / "d", online=_aten())
    online = summary["online_check"]
    assert online["failing"] == {}
    assert summary["online_checked_calls"] > 200
    rows = _rows(tmp_path / "d")
    assert {r["status"] for r in rows} <= {"pass", "warning"}
    # the capture's own statistics (min/max, norm: the session busy) are not checked
    assert not {"Aten.aminmax.default", "Aten.linalg_vector_norm.default"} & {r["api"] for r in rows}


def test_the_aten_level_works_at_l0(tmp_path):
    # no API capture needed: the dispatch mode sits under the session whatever its level
    summary, _, messages = _run(tmp_path / "d", online=_aten(["addmm"]), level="L0")
    assert summary["online_checked_calls"] > 0 and summary["online_check"]["failing"] == {}
    assert not any("at L0 nothing is checked" in m for m in messages)


def test_lowp_softmax_is_flagged_at_the_aten_level(tmp_path):
    summary, _, _ = _run(tmp_path / "d", LOWP, _aten())
    # the demo's naive softmax is one op (torch.ops.demo.naive_softmax): the dispatch level sees it whole
    assert list(summary["online_check"]["failing"]) == ["Demo.naive_softmax.default"]
    rows = _rows(tmp_path / "d")
    bad = [r for r in rows if r["status"] == "error"]
    assert bad and {r["api"] for r in bad} == {"Demo.naive_softmax.default"}
    assert {(r["dtype"], r["bench_dtype"]) for r in bad} == {("torch.bfloat16", "torch.float32")}


class _Session:
    """The session attributes the dispatch mode reads."""

    busy_depth = 0
    running = True
    step = 0
    check_mode = None


def _mode(patterns=()):
    from engines.adapters.torch.online_check import OnlineDispatch

    session = _Session()
    processor = oc.OnlineCheckProcessor(list(patterns))
    processor.session = session
    mode = OnlineDispatch(session, processor)
    assert session.check_mode is mode
    return session, processor, mode


def test_random_ops_are_listed_and_draw_as_without_the_check():
    x = torch.randn(64, 8)
    torch.manual_seed(7)
    plain = torch.nn.functional.dropout(x * 1.5, 0.5, training=True)
    after = torch.rand(3)
    session, processor, mode = _mode()
    torch.manual_seed(7)
    with mode:
        checked = torch.nn.functional.dropout(x * 1.5, 0.5, training=True)
    assert torch.equal(checked, plain) and torch.equal(torch.rand(3), after)
    # on the CPU dropout is dispatched as empty_like, bernoulli_ (the draw), div_ and mul
    assert processor.not_checked["Aten.bernoulli_.float"].startswith("random op")
    assert processor.not_checked["Aten.empty_like.default"].startswith("not a computation")
    assert [r["name"] for r in processor.rows] == ["Aten.mul.Tensor.0.forward", "Aten.div_.Scalar.0.forward",
                                                   "Aten.mul.Tensor.1.forward"]
    assert {(r["status"], r["bench_dtype"]) for r in processor.rows} == {("pass", "torch.float64")}


def test_nothing_is_checked_while_the_session_is_busy():
    session, processor, mode = _mode()
    session.busy_depth = 1
    with mode:
        torch.randn(4) * 2
    assert processor.rows == [] and processor.not_checked == {}


def test_a_failing_rerun_is_listed_and_the_op_runs_as_usual():
    def no_double(*a, **k):  # the reference (float64) kernel is missing
        raise RuntimeError("no float64 kernel")

    session, processor, mode = _mode()
    x = torch.randn(5)
    with mode:
        lib = torch.library.Library("aten_level_test", "FRAGMENT")
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda t: t * 2 if t.dtype == torch.float32 else no_double(), "CPU")
        out = torch.ops.aten_level_test.twice(x)
        again = torch.ops.aten_level_test.twice(x)
    assert torch.equal(out, x * 2) and torch.equal(again, x * 2) and session.busy_depth == 0
    assert processor.not_checked == {"Aten_level_test.twice.default":
                                     "the re-run failed: RuntimeError: no float64 kernel"}
    assert processor.rows == [] and processor.calls == 0


def test_schema_takes_the_level_and_refuses_another(tmp_path, capsys):
    job = load_config({"task": "tensor", "tensor": {"online_check": {"enabled": True, "level": "aten"}}})
    assert job.tensor.online_check.level == "aten"
    assert load_config({"task": "tensor"}).tensor.online_check.level == "api"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_job(tmp_path / "d", online={"enabled": True, "level": "kernel"})))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "statistics.online_check.level" in err[0]


def test_mindspore_refuses_the_aten_level(tmp_path, capsys):
    config = _job(tmp_path / "d", online=_aten(), framework="mindspore")
    with pytest.raises(JobError, match=r"^statistics\.online_check\.level: aten .* PyTorch only"):
        run_job(load_config(config))
    file = tmp_path / "ms.json"
    file.write_text(json.dumps(config))
    assert main(["run", str(file)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "statistics.online_check.level" in err[0]
    assert not (tmp_path / "d").exists() or not list((tmp_path / "d").rglob("*.h5"))


def test_bf16_autocast_demo_at_the_aten_level_has_no_failing_op(tmp_path):
    # below autocast: each op's inputs are already what its kernel saw (bf16), the reference float32
    summary, _, _ = _run(tmp_path / "d", online=_aten(), dtype="bf16")
    assert summary["online_check"]["failing"] == {}
    rows = _rows(tmp_path / "d")
    assert {r["bench_dtype"] for r in rows if r["api"] == "Aten.addmm.default"} == {"torch.float32"}


def test_in_script_debugger_checks_aten_ops(tmp_path):
    from test_debugger_support import torch_demo_in_script, write_config

    from probe_tui import PrecisionDebugger

    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "script"),
              "statistics": {"online_check": _aten(["naive_softmax"])}}
    cfg = write_config(tmp_path, "online", config)
    demo = {"preset": "tiny", "steps": 1, "dtype": "fp32", "faults": LOWP}
    _, summary, _ = torch_demo_in_script(demo, lambda: PrecisionDebugger(config_path=str(cfg)))
    assert list(summary["online_check"]["failing"]) == ["Demo.naive_softmax.default"]
    rank = next((tmp_path / "script").glob("*/rank0"))
    assert {r["api"] for r in oc.read_checks(rank)} == {"Demo.naive_softmax.default"}


def test_a_compiled_model_is_noted_as_running_eagerly():
    # Dynamo does not run compiled code under an active dispatch mode: the run is told, once per model
    from engines.adapters.torch.session import ATEN_COMPILED_NOTE, TorchCaptureSession
    from engines.capture.options import CaptureOptions

    for level in ("api", "aten"):
        session = TorchCaptureSession(CaptureOptions(level="L1"), None, rank=0)
        processor = oc.OnlineCheckProcessor([])
        session.plug(processor)
        if level == "aten":
            from engines.adapters.torch.online_check import OnlineDispatch

            OnlineDispatch(session, processor)
        depth = torch._C._len_torch_dispatch_stack()
        session.start(torch.compile(torch.nn.Linear(2, 2), backend="eager"))
        assert torch._C._len_torch_dispatch_stack() == depth + (level == "aten")  # pushed while it runs
        session.close()
        assert torch._C._len_torch_dispatch_stack() == depth
        assert (ATEN_COMPILED_NOTE in session.summary.notes) == (level == "aten")

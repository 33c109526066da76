"""The online check on MindSpore PyNative (docs/ACC_CHECK.md, "Online check"): the demo's API calls re-run on the
reference as it trains; the injected low-precision softmax is the only failing API and training is unchanged."""

import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from engines.acc_check import online as oc  # noqa: E402
from engines.events import ListSink  # noqa: E402
from engines.runner import run_job  # noqa: E402
from schemas import load_config  # noqa: E402

LOWP = {"lowp_softmax": {"layer": 1}}


def _run(folder, faults=None, online=None, steps=2):
    demo = {"preset": "tiny", "steps": steps, "dtype": "fp32"}
    if faults:
        demo["faults"] = faults
    section = {} if online is None else {"online_check": online}
    job = load_config({"task": "statistics", "dump_path": str(folder), "framework": "mindspore",
                       "target": {"demo": demo}, "level": "L1", "statistics": section})
    events = ListSink()
    outcome = run_job(job, events=events)
    assert outcome.exit_code == 0
    losses = [e.fields["loss"] for e in events.events if e.kind == "step"]
    messages = [e.fields["text"] for e in events.events if e.kind == "message"]
    return outcome.summary, losses, messages


def test_injected_softmax_is_the_only_failing_api_and_training_is_unchanged(tmp_path):
    plain_summary, plain, _ = _run(tmp_path / "plain", LOWP)
    summary, losses, messages = _run(tmp_path / "online", LOWP, {"enabled": True})
    assert losses == plain  # bit-identical: the re-runs see copies only
    assert summary["records"] == plain_summary["records"]
    online = summary["online_check"]
    assert list(online["failing"]) == ["Demo.naive_softmax"]
    assert summary["online_failing_apis"] == 1 and summary["online_checked_calls"] > 100
    assert any("Demo.naive_softmax failed on the reference" in m for m in messages)
    rows = oc.read_checks(tmp_path / "online" / "latest" / "rank0")
    assert {r["api"] for r in rows if r["status"] == "error"} == {"Demo.naive_softmax"}
    assert {r["step"] for r in rows} == {0, 1}
    linear = next(r for r in rows if r["api"] == "MintFunctional.linear")
    assert (linear["dtype"], linear["bench_dtype"]) == ("mindspore.float32", "mindspore.float64")
    softmax = next(r for r in rows if r["api"] == "Demo.naive_softmax")
    assert (softmax["dtype"], softmax["bench_dtype"]) == ("mindspore.bfloat16", "mindspore.float32")
    # the LayerNorm primitive is re-run as the object it is (its attributes need no record), and passes
    assert "Primitive.LayerNorm" not in online["not_checked"]
    layer_norms = [r for r in rows if r["api"] == "Primitive.LayerNorm"]
    assert layer_norms and {r["status"] for r in layer_norms} == {"pass"}
    assert online["not_checked"]["Tensor.to"].startswith("not a computation")


def test_fp32_demo_has_no_failing_api_and_an_api_list_selects(tmp_path):
    summary, _, _ = _run(tmp_path / "all", online={"enabled": True}, steps=1)
    assert summary["online_check"]["failing"] == {} and summary["online_check"]["warning"] == {}
    assert summary["online_checked_calls"] > 50
    summary, _, _ = _run(tmp_path / "one", LOWP, online={"enabled": True, "api_list": ["naive_softmax"]}, steps=1)
    assert list(summary["online_check"]["failing"]) == ["Demo.naive_softmax"]
    assert {r["api"] for r in oc.read_checks(tmp_path / "one" / "latest" / "rank0")} == {"Demo.naive_softmax"}

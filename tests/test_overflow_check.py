"""overflow_check end to end: the demo's injected fp16 overflow, healthy runs with -inf masks, the limit, the
batched (accelerator) path, in-place calls, masks made before the run, and what the stores hold."""

import json
from functools import partial

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch.demo import train  # noqa: E402
from engines.adapters.torch.zero_code import ZeroCodeCapture  # noqa: E402
from engines.capture.sink import dump_sink_factory  # noqa: E402
from engines.capture.summary import CaptureSummary  # noqa: E402
from engines.events import NullSink  # noqa: E402
from engines.frameworks import adapter_module  # noqa: E402
from engines.overflow.engine import OverflowTally, capture_options  # noqa: E402
from engines.overflow.results import read_calls, read_steps  # noqa: E402
from engines.overflow.session import build_session  # noqa: E402
from engines.runner import run_job  # noqa: E402
from engines.runs import open_run  # noqa: E402
from engines.store import DumpReader, store_kinds  # noqa: E402
from schemas import load_config  # noqa: E402

FAULT = {"fp16_overflow": {"layer": 1, "from_step": 2}}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _job(tmp_path, level="L1", nums=1, dtype="fp16", faults=None, steps=4):
    return load_config({"task": "overflow_check", "dump_path": str(tmp_path / "dump"), "level": level,
                        "target": {"demo": {"preset": "tiny", "steps": steps, "dtype": dtype,
                                            "faults": faults or {}}},
                        "overflow_check": {"overflow_nums": nums}})


def _rank0(outcome):
    return open_run(outcome.run_dir).path / "rank0"


def test_injected_fp16_overflow_names_exactly_the_exp_that_produced_inf(tmp_path):
    outcome = run_job(_job(tmp_path, faults=FAULT), events=NullSink(), fail_on_findings=True)
    assert outcome.exit_code == 3
    rank = _rank0(outcome)
    steps = read_steps(rank)
    # steps 0 and 1 are clean (their -inf causal masks are not overflows); step 2 stops the check
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert [s["flagged"] for s in steps] == [0, 0, 1]
    assert all(s["masks"] > 0 for s in steps)
    assert steps[2]["first"] == "Torch.exp.0.forward" and steps[2]["first_origin"] == "produced"
    assert steps[2]["first_reason"] == "produced +inf from finite inputs" and steps[2]["stopped"]
    calls = read_calls(rank)
    assert [(c["name"], c["origin"], c["kept"], c["first"]) for c in calls] == \
        [("Torch.exp.0.forward", "produced", True, True)]
    assert calls[0]["nonfinite"] == {"output.0": "+inf"}
    # the dump holds exactly that call, with its float16 input (finite) and output (inf) saved
    with DumpReader(rank) as dump:
        recs = dump.records()
        assert list(recs["name"]) == ["Torch.exp.0.forward"] and list(recs["step"]) == [2]
        t = dump.tensors()
        slots = list(t["slot"])
        assert slots == ["input.0", "output.0"] and set(t["dtype"]) == {"torch.float16"}
        x = dump.tensor_data(int(t["row"][0]))
        y = dump.tensor_data(int(t["row"][1]))
        assert np.isfinite(x).all() and np.isposinf(y).any()
        with np.errstate(over="ignore"):
            assert np.array_equal(np.exp(x.astype(np.float32)).astype(np.float16), y)
        assert t["posinf_count"][1] == int(np.isposinf(y).sum()) and t["nan_count"][0] == 0
    summary = outcome.summary
    assert summary["verdict"].startswith("overflow at step 2: Torch.exp.0.forward produced +inf from finite inputs")
    assert summary["tables"][0]["rows"][0][:3] == [2, "Torch.exp.0.forward", "produced"]


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_healthy_runs_report_nothing(tmp_path, level, dtype):
    outcome = run_job(_job(tmp_path, level=level, nums=-1, dtype=dtype, steps=2), events=NullSink(),
                      fail_on_findings=True)
    assert outcome.exit_code == 0
    assert outcome.summary["flagged_calls"] == 0
    assert outcome.summary["verdict"].startswith("no overflow in 2 checked steps")
    rank = _rank0(outcome)
    assert "dump" not in store_kinds(rank)  # nothing kept
    plain = train({"preset": "tiny", "steps": 2, "dtype": dtype}).losses
    assert outcome.summary["losses"] == plain  # the check changes no number (docs/decisions/0010-capture-does-not-change-numbers.md)
    steps = read_steps(rank)
    assert [s["flagged"] for s in steps] == [0, 0]
    if level != "L0":  # the -inf masked_fill and the softmax that consumes it were seen and not flagged
        assert all(s["masks"] >= 2 for s in steps)


def test_mix_level_puts_the_api_origin_first_inside_its_module(tmp_path):
    outcome = run_job(_job(tmp_path, level="mix", nums=-1, faults=FAULT, steps=3), events=NullSink())
    rank = _rank0(outcome)
    steps = {s["step"]: s for s in read_steps(rank)}
    assert steps[2]["first"] == "Torch.exp.0.forward"
    assert steps[2]["first_parent"] == "Module.blocks.1.attn.CausalSelfAttention.forward.0"
    calls = [c for c in read_calls(rank, step=2)]
    module = [c for c in calls if c["name"] == "Module.blocks.1.attn.CausalSelfAttention.forward.0"]
    assert module and module[0]["origin"] == "produced"  # its inputs were finite too
    assert module[0]["order"] > calls[0]["order"]
    backward = [c for c in calls if c["direction"] == "backward"]
    assert backward and all(c["origin"] == "inputs" for c in backward)
    assert steps[2]["flagged"] == len(calls) and all(c["kept"] for c in calls)


def test_overflow_nums_keeps_that_many_and_stops(tmp_path):
    outcome = run_job(_job(tmp_path, nums=3, faults=FAULT), events=NullSink())
    rank = _rank0(outcome)
    calls = read_calls(rank)
    assert [c["name"] for c in calls] == ["Torch.exp.0.forward", "Tensor.masked_fill.1.forward",
                                          "Tensor.sum.0.forward"]
    assert [c["origin"] for c in calls] == ["produced", "inputs", "inputs"]
    assert [s["step"] for s in read_steps(rank)] == [0, 1, 2]  # step 3 is not checked any more
    with DumpReader(rank) as dump:
        assert len(dump.records()["name"]) == 3


def _session_run(fn, tmp_path, level="L1", nums=-1, batched=False):
    options = capture_options({"level": level, "step": []})
    summary = CaptureSummary()
    found = []

    def rank_dir(rank):
        path = tmp_path / ("rank%d" % rank)
        path.mkdir(parents=True, exist_ok=True)
        return path

    sinks = dump_sink_factory(rank_dir, options, {"framework": "pytorch"}, summary)
    tally = OverflowTally(rank_dir(0), {"framework": "pytorch", "rank": 0}, "auto")

    def on_step(findings):
        found.append(findings)
        tally(findings)

    session = build_session(partial(adapter_module, "pytorch"), options, sinks, summary=summary, overflow_nums=nums,
                            on_step=on_step, rank=0, batched=batched)
    with ZeroCodeCapture(options, sinks, summary=summary, session=session):
        fn()
    tally.close("finished")
    return session, found


def test_batched_path_syncs_once_per_clean_step_and_finds_the_same_origin(tmp_path):
    knobs = {"preset": "tiny", "steps": 3, "dtype": "fp16", "faults": {"fp16_overflow": {"layer": 0,
                                                                                          "from_step": 2}}}
    session, found = _session_run(lambda: train(knobs), tmp_path / "b", nums=1, batched=True)
    assert [f.flagged for f in found] == [0, 0, 1]
    assert found[2].first.name == "Torch.exp.0.forward" and found[2].first.reason.endswith("from finite inputs")
    assert session.processor.syncs == 3  # one transfer of the finiteness tests per step
    assert [f.syncs for f in found[:2]] == [1, 1]  # clean steps, -inf masks included: one transfer each
    assert found[2].syncs > 1  # the step that overflows reads its suspicious tensors
    _, immediate = _session_run(lambda: train(knobs), tmp_path / "i", nums=1)
    assert [(f.step, f.checked, f.masks) for f in immediate[:2]] == [(f.step, f.checked, f.masks) for f in found[:2]]
    assert [(c.name, c.origin, c.slots) for c in immediate[2].calls] == \
        [(c.name, c.origin, c.slots) for c in found[2].calls]


class _InPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 1.0
        y.mul_(1e4)  # float16: finite inputs, +inf outputs, written over its own input
        return y.sum()


def test_in_place_call_is_flagged_with_its_input_as_it_was_before_the_call(tmp_path):
    x = torch.full((4,), 10.0, dtype=torch.float16)
    x[0] = 1.0
    _, found = _session_run(lambda: _InPlace()(x), tmp_path)
    assert found[0].first.name == "Tensor.mul_.0.forward" and found[0].first.origin_name == "produced"
    with DumpReader(tmp_path / "rank0") as dump:
        recs = dump.records()
        row = list(recs["name"]).index("Tensor.mul_.0.forward")
        t = dump.tensors()
        mine = [i for i in range(len(t["record"])) if t["record"][i] == recs["row"][row]]
        data = {t["slot"][i]: dump.tensor_data(int(t["row"][i])) for i in mine}
    assert data["input.0"].tolist() == [1.0, 10.0, 10.0, 10.0]  # the pre-call value, not the overwritten one
    assert data["output.0"][0] == 1e4 and np.isposinf(data["output.0"][1:]).all()


class _Masked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.full((4, 4), float("-inf")).triu(1))  # built before the run

    def forward(self, x):
        return torch.softmax(x + self.mask, dim=-1)


def test_mask_buffer_made_before_the_run_is_not_an_overflow_but_bad_data_is(tmp_path):
    x = torch.randn(2, 4, 4)
    _, found = _session_run(lambda: _Masked()(x), tmp_path / "a")
    assert found[0].flagged == 0 and found[0].masks == 2
    x[0, 0, 0] = float("nan")
    _, found = _session_run(lambda: _Masked()(x), tmp_path / "b")
    assert found[0].first.name == "Tensor.add.0.forward" and found[0].first.origin_name == "inputs"
    assert "input.0 (nan)" in found[0].first.reason


class _FullyMasked(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x.masked_fill(torch.ones_like(x, dtype=torch.bool), float("-inf")), dim=-1)


def test_nan_from_a_fully_masked_row_is_an_origin(tmp_path):
    _, found = _session_run(lambda: _FullyMasked()(torch.randn(2, 3)), tmp_path)
    first = found[0].first
    assert first.name == "Torch.softmax.0.forward" and first.origin_name == "produced"
    assert first.reason == "produced nan from masked (-inf) inputs"
    assert found[0].masks == 1  # the masked_fill itself


def test_sample_config_finds_the_overflow(tmp_path, monkeypatch):
    from pathlib import Path

    sample = json.loads((Path(__file__).resolve().parent.parent / "sample_configs" / "overflow_check.json")
                        .read_text())
    sample["dump_path"] = str(tmp_path / "overflow")
    outcome = run_job(load_config(sample), events=NullSink(), fail_on_findings=True)
    assert outcome.exit_code == 3
    assert "Torch.exp.0.forward" in outcome.summary["verdict"]


def test_module_level_says_when_the_values_appeared_between_recorded_calls(tmp_path):
    outcome = run_job(_job(tmp_path, level="L0", nums=1, faults=FAULT, steps=3), events=NullSink())
    (call,) = read_calls(_rank0(outcome))
    # at L0 the float16 exp is functional code inside the attention module: the first module that sees its
    # result is the attention's dropout, and the report says where the values were made
    assert call["name"] == "Module.blocks.1.attn.dropout.Dropout.forward.0" and call["origin"] == "inputs"
    assert "made by code this level does not record in Module.blocks.1.attn.CausalSelfAttention.forward.0" \
        in call["reason"]


class _Uninitialised(torch.nn.Module):
    def forward(self, x):
        buf = torch.empty(2, 4)  # NaN: torch fills uninitialised memory when deterministic algorithms are on
        assert torch.isnan(buf).all()
        torch.relu(buf)
        return x * 1e4


def test_uninitialised_memory_is_no_overflow_and_the_real_one_is_found(tmp_path):
    """``torch.empty`` returns whatever memory held (NaN under deterministic algorithms: the buffers a pipeline
    stage receives into and runs its shape inference on, FSDP2's all-gather buffers): not an origin, and what is
    computed from it is not flagged; the overflow after it is the first finding."""
    torch.use_deterministic_algorithms(True)
    try:
        _, found = _session_run(lambda: _Uninitialised()(torch.full((4,), 10.0, dtype=torch.float16)), tmp_path,
                                nums=1)
    finally:
        torch.use_deterministic_algorithms(False)
    first = found[0].first
    assert first.name == "Tensor.mul.0.forward" and first.origin_name == "produced", (first.name, first.reason)
    assert found[0].masks == 3  # the allocation, and the isnan and relu of its values


class _Received(torch.nn.Module):
    def forward(self, buf):
        dist = torch.distributed
        dist.broadcast(buf, src=0, async_op=True).wait()
        buf.data.copy_(torch.full_like(buf, 60000.0))  # the data arriving later: no version bump
        return buf * 2.0  # float16: +inf from finite inputs


def test_a_buffer_an_async_collective_fills_is_checked_as_it_arrives(tmp_path, monkeypatch):
    """overflow_check on a pipeline stage: the record of an async collective is kept (no hook failure) and the
    values its buffer holds when used are the ones checked."""
    import torch.distributed as dist
    from dist_support import free_port

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        session, found = _session_run(lambda: _Received()(torch.ones(1, dtype=torch.float16)), tmp_path, nums=1)
    finally:
        dist.destroy_process_group()
    assert not session.summary.failure_detail
    assert found[0].first.name == "Tensor.mul.0.forward" and found[0].first.origin_name == "produced"


class _UsesBuffer(torch.nn.Module):
    def forward(self, buf, x):
        # computing on memory nothing wrote yet, forward and backward (a pipeline stage's shape inference)
        torch.relu(buf).pow(2).sum().backward()
        return x * 1e4


def test_uninitialised_memory_allocated_before_recording_began_is_no_overflow(tmp_path):
    """The allocation happens before the step's first module call, so no record holds it: the check still knows
    the memory is uninitialised (a pipeline stage allocates its shape-inference inputs that way)."""
    def body():
        buf = torch.empty(2, 4, requires_grad=True)  # NaN under deterministic algorithms; before recording begins
        assert torch.isnan(buf).all()
        return _UsesBuffer()(buf, torch.full((1,), 10.0, dtype=torch.float16))

    torch.use_deterministic_algorithms(True)
    try:
        _, found = _session_run(body, tmp_path, nums=1)
    finally:
        torch.use_deterministic_algorithms(False)
    first = found[0].first
    assert first.name == "Tensor.mul.0.forward" and first.origin_name == "produced", (first.name, first.reason)


class _ReusedId(torch.nn.Module):
    """An async collective's tensor dies and an uninitialised allocation takes its Python id (CPython reuses the
    freed object's memory), as a pipeline stage frees the metadata tensors it sent during shape inference and then
    allocates its receive buffers. Whether the next allocation gets that memory depends on what else was
    allocated meanwhile, so the pattern is repeated until one does."""

    def forward(self, x):
        keep = []
        for _ in range(50):
            sent = torch.ones(4)
            torch.distributed.all_reduce(sent, async_op=True).wait()  # async: ``sent`` is read anew at each sight
            dead = id(sent)
            del sent
            for _ in range(200):
                buf = torch.empty(4)  # NaN under deterministic algorithms
                if id(buf) == dead:
                    torch.relu(buf)  # computing on uninitialised memory: a mask
                    return x * 1e4
                keep.append(buf)
        raise AssertionError("no allocation took a freed tensor's id")


def test_a_dead_async_tensors_id_taken_by_uninitialised_memory_is_no_overflow(tmp_path, monkeypatch):
    """CI failure (pipeline bed, under load): a receive buffer whose id had been a tensor an async collective used
    earlier in the step was read anew at every sight, so it lost what its allocation said (uninitialised memory)
    and its NaN was flagged: the step stopped the check (overflow_nums 1) and the next step was never checked."""
    import torch.distributed as dist
    from dist_support import free_port

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.use_deterministic_algorithms(True)
    try:
        session, found = _session_run(lambda: _ReusedId()(torch.full((1,), 10.0, dtype=torch.float16)), tmp_path,
                                      nums=1)
    finally:
        torch.use_deterministic_algorithms(False)
        dist.destroy_process_group()
    assert not session.summary.failure_detail
    first = found[0].first
    assert first.name == "Tensor.mul.0.forward" and first.origin_name == "produced", (first.name, first.reason)

"""Names, counters, module paths and the filters, as pure functions (docs/reference/msprobe-tasks.md §3, §14 C3/C4/S6)."""

import pytest

from engines.capture import naming
from engines.capture.filters import (
    REASON_LIST,
    REASON_SCOPE,
    ApiSelector,
    CaptureFilter,
    DataMode,
    ScopeRange,
)
from engines.capture.options import CaptureOptions


def test_msprobe_name_shapes():
    assert naming.api_record_name("Functional", "linear", 3) == "Functional.linear.3.forward"
    assert naming.module_record_name("layer1", "Linear", 0) == "Module.layer1.Linear.forward.0"
    assert naming.module_record_name("layer1", "Linear", 2, "backward") == "Module.layer1.Linear.backward.2"
    assert naming.param_grad_record_name("layer1", "Linear", 0) == "Module.layer1.Linear.parameters_grad.0"
    assert naming.save_record_name("act", 1) == "act.1.debug"
    assert naming.save_record_name("act", 1, grad=True) == "act_grad.1.debug"


def test_backward_of_api_and_module_names():
    assert naming.backward_of("Tensor.__add__.0.forward") == "Tensor.__add__.0.backward"
    assert naming.backward_of("Module.blocks.0.attn.Attention.forward.3") == "Module.blocks.0.attn.Attention.backward.3"
    # An API whose name contains "forward" keeps it (msprobe's replace() mangles it, docs/reference/msprobe-tasks.md §13 row 22).
    assert naming.backward_of("Torch.forward_ad.0.forward") == "Torch.forward_ad.0.backward"


def test_name_validation_regexes():
    assert naming.is_api_name("Functional.linear.0.forward")
    assert naming.is_api_name("MindSpeed.npu_rotary.2.backward")
    assert not naming.is_api_name("Module.layer1.Linear.forward.0")
    assert naming.is_module_name("Module.layer1.Linear.forward.0")
    assert naming.is_module_name("Cell.net.Dense.backward.1")
    assert naming.split_api_name("Tensor.add_.12.backward") == ("Tensor", "add_", 12, "backward")


def test_counters_are_per_name_and_reset():
    c = naming.CallCounter()
    assert [c.next("Functional.linear"), c.next("Functional.linear"), c.next("Tensor.add")] == [0, 1, 0]
    c.reset()
    assert c.next("Functional.linear") == 0


@pytest.mark.parametrize("path,dp,want", [
    ("module.layers.0.attn", True, "layers.0.attn"),
    ("layers.0._fsdp_wrapped_module.attn", False, "layers.0.attn"),
    ("_orig_mod.encoder._checkpoint_wrapped_module.fc", False, "encoder.fc"),
    ("module", False, "module"),
])
def test_wrapper_components_are_stripped(path, dp, want):
    assert naming.clean_module_path(path, dp) == want


def test_data_mode_axes():
    all_modes = DataMode(["all"])
    assert all(all_modes.wants(f, i) for f in (True, False) for i in (True, False))
    fwd_in = DataMode(["forward", "input"])
    assert fwd_in.wants(True, True)
    assert not fwd_in.wants(True, False) and not fwd_in.wants(False, True)
    assert not fwd_in.param_grads  # forward-only skips parameter gradients
    bwd = DataMode(["backward"])
    assert bwd.wants(False, True) and bwd.wants(False, False) and not bwd.wants(True, True)
    assert bwd.param_grads


def test_scope_range_in_call_order():
    s = ScopeRange(("Functional.linear.1.forward", "Tensor.add.2.forward"))
    seq = ["Functional.linear.0.forward", "Functional.linear.1.forward", "Tensor.mul.0.forward",
           "Tensor.add.2.forward", "Tensor.add.3.forward", "Functional.linear.1.forward"]
    assert [s.admit(n) for n in seq] == [False, True, True, True, False, False]
    assert s.finished
    s.reset()
    assert s.admit("Functional.linear.1.forward")


def test_filter_reasons_scope_then_list():
    f = CaptureFilter(CaptureOptions(list_patterns=("relu",)))
    assert f.record_reason("Functional.relu.0.forward") is None
    assert f.record_reason("Tensor.relu_.3.backward") is None
    assert f.record_reason("Functional.leaky_relu.0.forward") is None
    assert f.record_reason("Functional.linear.0.forward") == REASON_LIST
    assert f.record_reason("Functional.linear.0.forward", inside_listed_module=True) is None
    g = CaptureFilter(CaptureOptions(scope=("Tensor.add.0.forward", "Tensor.add.1.forward")))
    assert g.record_reason("Tensor.mul.0.forward") == REASON_SCOPE


def test_rank_and_step_selection():
    f = CaptureFilter(CaptureOptions(ranks=(0, 2), steps=(0, 2, 3)))
    assert f.rank_selected(2) and not f.rank_selected(1)
    assert [f.step_selected(s) for s in range(5)] == [True, False, True, True, False]
    assert f.past_last_step(4) and not f.past_last_step(3)
    assert CaptureFilter(CaptureOptions()).rank_selected(7)


def test_api_selector_allow_deny():
    deny = ApiSelector(deny=["gelu", "Tensor.t"])
    assert not deny.admits("Functional.gelu")
    assert not deny.admits("Tensor.transpose")
    assert deny.admits("Functional.linear")
    allow = ApiSelector(allow=["Functional."])
    assert allow.admits("Functional.linear") and not allow.admits("Tensor.add")


@pytest.mark.parametrize("bad,field", [
    ({"scope": ("a",)}, "scope"),
    ({"level": "L2"}, "level"),
    ({"summary_mode": "sha"}, "summary_mode"),
    ({"data_mode": ("sideways",)}, "data_mode"),
    ({"task": "monitor"}, "task"),
])
def test_options_reject_what_capture_cannot_do(bad, field):
    with pytest.raises(ValueError, match=field):
        CaptureOptions(**bad)


def test_options_from_a_loaded_job():
    from schemas import load_config

    job = load_config({
        "task": "tensor", "level": "mix", "rank": [1, "3-4"], "step": ["0-1"], "precision": "high",
        "tensor": {"scope": [], "list": ["linear"], "data_mode": ["forward"], "summary_mode": "hash",
                   "apis": {"deny": ["dropout"]}},
        "output": {"compression": "lzf", "disk_budget": "1MB"},
    })
    o = CaptureOptions.from_job(job)
    assert (o.task, o.level, o.ranks, o.steps, o.precision) == ("tensor", "mix", (1, 3, 4), (0, 1), "high")
    assert o.list_patterns == ("linear",) and o.data_mode == ("forward",) and o.summary_mode == "hash"
    assert o.api_deny == ("dropout",) and o.compression == "lzf" and o.disk_budget > 0
    assert o.wants_crc32 and o.wants_xhash and o.saves_tensors

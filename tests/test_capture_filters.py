"""Filters end to end on the demo (docs/reference/msprobe-tasks.md §14 C2-C5, S5): step, rank, scope, list, data_mode, apis, tensor_list."""

import pytest
import torch
from test_capture_support import TINY, make_session, run_demo

THREE = dict(TINY, steps=4)


def test_step_filter_writes_only_the_selected_steps(tmp_path, caplog):
    dump, summary, result = run_demo(tmp_path, THREE, level="L1", steps=(0, 2, 3))
    assert dump.steps() == [0, 2, 3]
    assert summary.steps_skipped == [1]
    assert result.steps == 4  # training ran on; only capture stopped
    assert dump.names(0) and dump.names(2)
    # Counters restart every step: step 2 names are the same as step 0's.
    assert "Functional.linear.0.forward" in dump.names(2)
    dump.close()


def test_step_filter_turns_capture_off_after_the_last_step(tmp_path, caplog):
    with caplog.at_level("INFO", logger="engines.capture"):
        dump, summary, _ = run_demo(tmp_path, THREE, level="L1", steps=(1,))
    assert dump.steps() == [1]
    assert sum("last selected step" in r.message for r in caplog.records) == 1
    dump.close()


def test_rank_filter_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    _, summary, _ = run_demo(tmp_path, dict(TINY, steps=1), level="L1", ranks=(0,))
    assert summary.records == 0 and not (tmp_path / "rank1").exists() and not (tmp_path / "rank0").exists()
    dump, _, _ = run_demo(tmp_path / "b", dict(TINY, steps=1), level="L1", ranks=(1,))
    assert dump.path.name == "rank1" and dump.names(0)
    assert not (tmp_path / "b" / "rank0").exists()


def test_scope_range_dumps_exactly_the_events_between(tmp_path):
    full, _, _ = run_demo(tmp_path / "full", dict(TINY, steps=1), level="L1")
    order = full.names(0)
    start, end = "Functional.linear.1.forward", "Functional.linear.1.backward"
    scoped, summary, _ = run_demo(tmp_path / "scoped", dict(TINY, steps=1), level="L1", scope=(start, end))
    i, j = order.index(start), order.index(end)
    assert scoped.names(0) == order[i:j + 1]
    assert summary.missing["filtered: outside scope"] == len(order) - (j + 1 - i)


def test_module_scope_at_mix_includes_the_apis_inside(tmp_path):
    start = "Module.blocks.1.mlp.MLP.forward.0"
    end = "Module.blocks.1.mlp.fc2.Linear.forward.0"
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=1), level="mix", scope=(start, end))
    names = dump.names(0)
    assert names[0] == start and end in names
    assert "Module.blocks.1.mlp.fc1.Linear.forward.0" in names and "Functional.gelu.1.forward" in names
    assert not any("blocks.0" in n for n in names)


def test_list_is_a_substring_match(tmp_path):
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=1), level="L1", list_patterns=("gelu", "Functional.linear.3."))
    names = set(dump.names(0))
    assert names == {"Functional.gelu.0.forward", "Functional.gelu.1.forward", "Functional.gelu.0.backward",
                     "Functional.gelu.1.backward", "Functional.linear.3.forward", "Functional.linear.3.backward"}


def test_list_with_a_module_name_at_mix_dumps_everything_inside(tmp_path):
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=1), level="mix", list_patterns=("Module.blocks.0.mlp.MLP",))
    names = dump.names(0)
    assert "Module.blocks.0.mlp.MLP.forward.0" in names
    assert "Module.blocks.0.mlp.fc1.Linear.forward.0" in names
    assert "Functional.gelu.0.forward" in names  # inside the listed module
    assert "Functional.gelu.1.forward" not in names  # blocks.1


@pytest.mark.parametrize("modes,fwd_slots,bwd_slots,param_grads", [
    (("forward", "input"), {"input", "parameters"}, set(), False),  # parameters are module inputs
    (("forward",), {"input", "output", "parameters"}, set(), False),
    (("backward",), set(), {"input", "output"}, True),
    (("output",), {"output"}, {"output"}, True),
])
def test_data_mode_axes(tmp_path, modes, fwd_slots, bwd_slots, param_grads):
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=1), level="L0", data_mode=modes)
    names = dump.names(0)
    fwd = [n for n in names if ".forward." in n]
    bwd = [n for n in names if ".backward." in n]
    pg = [n for n in names if ".parameters_grad." in n]
    seen_fwd = {s.split(".")[0] for n in fwd for s in dump.rows(n)}
    seen_bwd = {s.split(".")[0] for n in bwd for s in dump.rows(n)}
    assert seen_fwd == fwd_slots
    assert seen_bwd == bwd_slots
    assert bool(pg) == param_grads


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_backward_only_writes_no_forward_record(tmp_path, level):
    """data_mode ["backward"] means backward only: no forward record, so none of their non-tensor argument rows."""
    dump, summary, _ = run_demo(tmp_path, dict(TINY, steps=1), level=level, data_mode=("backward",))
    names = dump.names(0)
    assert not [n for n in names if ".forward" in n]
    assert "Functional.linear.0.backward" in names and "Functional.layer_norm.0.backward" in names
    if level == "mix":
        assert "Module.blocks.0.mlp.fc1.Linear.backward.0" in names
    assert summary.missing["filtered: data_mode"] > 0
    dump.close()


def test_apis_deny_and_allow(tmp_path):
    dump, summary, _ = run_demo(tmp_path / "deny", dict(TINY, steps=1), level="L1", api_deny=("gelu", "Tensor."))
    names = dump.names(0)
    assert not any("gelu" in n or n.startswith("Tensor.") for n in names)
    assert "Functional.linear.0.forward" in names
    dump, _, _ = run_demo(tmp_path / "allow", dict(TINY, steps=1), level="L1", api_allow=("Functional.softmax",))
    assert set(dump.names(0)) == {"Functional.softmax.0.forward", "Functional.softmax.1.forward",
                                  "Functional.softmax.0.backward", "Functional.softmax.1.backward"}


def test_denied_apis_run_untouched_inside_allowed_ones(tmp_path):
    """A denied API is never wrapped or swapped: identity checks in user code keep working (msprobe pain)."""
    import torch.nn.functional as F

    x = torch.randn(4)
    s = make_session(tmp_path, level="L1", api_deny=("gelu",))
    s.start()
    act = F.gelu
    assert act is F.gelu  # nothing was patched
    y = act(x)
    s.step_end()
    s.close()
    assert y.shape == (4,)
    assert s.summary.records == 0 and not (tmp_path / "rank0").exists()  # nothing to write: no file


def test_tensor_list_saves_tensors_for_matching_records_only(tmp_path):
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=1), level="L1", tensor_list=("Functional.softmax.0",))
    t = dump._tensors
    stored = {(str(dump._records["name"][list(dump._records["row"]).index(r)]), str(s))
              for r, s, p in zip(t["record"], t["slot"], t["pool"]) if p}
    assert stored and all(name.startswith("Functional.softmax.0.") for name, _ in stored)
    rows = dump.rows("Functional.softmax.0.forward")
    data = dump.reader.tensor_data(int(rows["output.0"]["row"]))
    assert data is not None and list(data.shape) == [2, 4, 8, 8]
    assert abs(float(data.sum()) - 2 * 4 * 8) < 1e-3  # softmax rows sum to 1

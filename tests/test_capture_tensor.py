"""The tensor task (docs/reference/msprobe-tasks.md §6, §14 T1-T4): full tensors in the store, equal to the live ones, a few files a
step, compression, a disk budget that stops dumping and not training, and the per-step size estimate."""

import logging

import numpy as np
import pytest
from test_capture_levels import reference_run
from test_capture_support import TINY, run_demo

from engines.store import as_float32


@pytest.fixture(scope="module")
def reference():
    return reference_run()


def test_every_row_has_its_tensor_equal_to_the_live_one(tmp_path, reference):
    model, seen, grads, params, _ = reference
    dump, summary, _ = run_demo(tmp_path, dict(TINY, steps=1), level="mix", task="tensor")
    t = dump._tensors
    assert all(p for p in t["pool"]), "every tensor row points at stored data"
    rows = dump.rows("Functional.linear.0.forward")
    got = dump.reader.tensor_data(int(rows["output.0"]["row"]))
    assert np.array_equal(got, seen["blocks.0.attn.qkv"]["output"].numpy())
    w = dump.reader.tensor_data(int(dump.rows("Module.head.Linear.forward.0")["parameters.weight"]["row"]))
    assert np.array_equal(w, params["head.weight"].numpy())
    g = dump.reader.tensor_data(int(dump.rows("Module.head.Linear.parameters_grad.0")["weight"]["row"]))
    assert np.array_equal(g, grads["head.weight"].numpy())
    bwd = dump.rows("Functional.linear.0.backward")
    gin = dump.reader.tensor_data(int(bwd["output.0"]["row"]))
    assert np.array_equal(gin, seen["blocks.0.attn.qkv"]["grad_input"][0].numpy())


def test_a_tensor_seen_twice_is_stored_once(tmp_path):
    dump, summary, _ = run_demo(tmp_path, dict(TINY, steps=1), level="L1", task="tensor")
    t = dump._tensors
    refs = [(p, int(o)) for p, o in zip(t["pool"], t["offset"]) if p]
    assert len(set(refs)) < len(refs)  # outputs that are the next op's inputs share one copy
    # the output of layer_norm.0 is the input of linear.0: same stored bytes
    a = dump.rows("Functional.layer_norm.0.forward")["output.0"]
    b = dump.rows("Functional.linear.0.forward")["input.0"]
    assert (a["pool"], a["offset"]) == (b["pool"], b["offset"])


def test_bfloat16_tensors_keep_their_bits(tmp_path):
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=1, dtype="bf16"), level="L1", task="tensor",
                          list_patterns=("Functional.linear.0.forward",))
    row = dump.rows("Functional.linear.0.forward")["output.0"]
    assert row["dtype"] == "torch.bfloat16"
    bits = dump.reader.tensor_data(int(row["row"]))
    assert bits.dtype == np.uint16
    values = as_float32(bits)
    assert float(values.max()) == float(row["max"]) and float(values.min()) == float(row["min"])


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_at_most_four_files_a_step(tmp_path, mode):
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=3), level="mix", task="tensor", store_mode=mode)
    files = [p for p in dump.path.rglob("*") if p.is_file()]
    assert len(files) <= 4 * 3
    assert dump.steps() == [0, 1, 2]


def test_compression_round_trips(tmp_path):
    dump, _, _ = run_demo(tmp_path, dict(TINY, steps=1), level="L1", task="tensor", compression="gzip",
                          compression_level=4, list_patterns=("softmax",))
    row = dump.rows("Functional.softmax.0.forward")["output.0"]
    data = dump.reader.tensor_data(int(row["row"]))
    assert abs(float(data.sum()) - 2 * 4 * 8) < 1e-3


def test_disk_budget_stops_dumping_not_training(tmp_path, caplog):
    """Tensors stop before the step whose tensors would pass the budget; statistics go on; the files stay within
    the budget (it once counted logical bytes, and a 3 MB budget gave a 7.2 MB file)."""
    from engines.adapters.torch.demo import train

    budget = 9_000_000  # step 0's tensors (~5.7 MB) fit, step 1's do not
    baseline = train(dict(TINY, steps=3)).losses
    with caplog.at_level(logging.WARNING):
        dump, summary, result = run_demo(tmp_path, dict(TINY, steps=3), level="L1", task="tensor",
                                         disk_budget=budget)
    assert result.losses == baseline
    assert dump.steps() == [0, 1, 2]  # statistics go on
    t = dump._tensors
    stored = [p for p in t["pool"] if p]
    assert 0 < len(stored) < len(t["pool"])
    late = dump.rows("Functional.linear.0.forward", step=2)
    assert late["output.0"]["pool"] == "" and np.isfinite(late["output.0"]["max"])
    warnings = [r for r in caplog.records if "budget" in r.getMessage()]
    assert len(warnings) == 1
    assert any("budget" in n for n in summary.notes)
    assert sum(p.stat().st_size for p in tmp_path.rglob("*.h5")) <= budget


def test_estimate_matches_what_a_step_writes(tmp_path):
    from engines.capture.engine import estimate_step_bytes
    from schemas import load_config

    for task, extra in (("tensor", {}), ("statistics", {})):
        job = load_config({"task": task, "level": "L1", "dump_path": str(tmp_path / task),
                           "target": {"demo": dict(TINY, steps=3)}, task: extra})
        estimate = estimate_step_bytes(job)
        dump, summary, _ = run_demo(tmp_path / ("real_" + task), dict(TINY, steps=3), level="L1", task=task)
        per_step = summary.bytes / 3
        assert 0.5 * per_step < estimate < 2.0 * per_step, (task, estimate, per_step)


@pytest.mark.parametrize("async_dump", [False, True])
def test_memory_budget_bounds_the_held_copies(tmp_path, monkeypatch, async_dump):
    """output.memory_budget: the full-tensor copies a step holds stay within the budget plus the one copy being
    added (before, all of a step's ~5.7 MB on the tiny demo were held until its end), the early-written copies are
    the same bytes under the same rows as a run without a budget, and training is unchanged."""
    from engines.adapters.torch import entries as torch_entries
    from engines.adapters.torch.demo import train

    budget = 256 << 10
    held, largest = [], [0]
    save = torch_entries.TensorEntries._save

    def spy(self, e, t):
        save(self, e, t)
        held.append(sum(int(a.nbytes) for a, _ in self.host_data.values()))
        largest[0] = max(largest[0], t.numel() * t.element_size())

    baseline = train(dict(TINY, steps=2)).losses
    ref, ref_summary, _ = run_demo(tmp_path / "ref", dict(TINY, steps=2), level="L1", task="tensor")
    monkeypatch.setattr(torch_entries.TensorEntries, "_save", spy)
    dump, summary, result = run_demo(tmp_path / "budget", dict(TINY, steps=2), level="L1", task="tensor",
                                     memory_budget=budget, async_dump=async_dump)
    assert result.losses == baseline
    assert held and max(held) <= budget + largest[0], (max(held), budget)
    assert sum(ref.reader.tensor_data(r).nbytes for r in range(len(ref._tensors["pool"]))) > 4 * budget
    assert dump.steps() == ref.steps() == [0, 1]
    t, r = dump._tensors, ref._tensors
    assert dump.names() == ref.names() and list(t["slot"]) == list(r["slot"]) and all(p for p in t["pool"])
    for row in range(len(r["pool"])):
        assert np.array_equal(dump.reader.tensor_data(row), ref.reader.tensor_data(row)), row
    # the early writes are counted into their step (the spy's frame in the call stacks adds a few bytes)
    assert abs(summary.bytes - ref_summary.bytes) < 0.01 * ref_summary.bytes


KILLED_MID_STEP = r'''
import os, signal, sys
from pathlib import Path
sys.path[:0] = [sys.argv[2], os.path.join(sys.argv[2], "tests")]
from engines.capture import session as capture_session
from test_capture_support import TINY, run_demo

spill = capture_session.CaptureSession.spill_tensors

def spill_then_die(self, data):
    spill(self, data)
    if self.step == 1:  # step 1's first tensors are in the file, uncommitted; HDF5 flushed them out
        self.sink.writer.store._segment.flush()
        os.kill(os.getpid(), signal.SIGKILL)

capture_session.CaptureSession.spill_tensors = spill_then_die
run_demo(Path(sys.argv[1]), dict(TINY, steps=3), level="L1", task="tensor", memory_budget=256 << 10)
'''


def test_a_run_killed_after_an_early_write_keeps_its_completed_steps(tmp_path):
    """Tensors written early under memory_budget stay invisible until their step's commit: killed in step 1 just
    after some of its tensors reached the file, the run reads as step 0, whole, with the same data."""
    import subprocess
    import sys
    from pathlib import Path

    from test_capture_support import Dump

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", KILLED_MID_STEP, str(tmp_path / "killed"), str(root)],
                          capture_output=True, timeout=300, cwd=str(tmp_path))
    assert done.returncode == -9, done.stderr.decode(errors="replace")[-2000:]
    ref, _, _ = run_demo(tmp_path / "ref", dict(TINY, steps=1), level="L1", task="tensor")
    dump = Dump(next((tmp_path / "killed").glob("rank*")))
    assert dump.steps() == [0]
    t, r = dump._tensors, ref._tensors
    assert dump.names() == ref.names() and len(t["pool"]) == len(r["pool"]) and all(p for p in t["pool"])
    for row in range(len(r["pool"])):
        assert np.array_equal(dump.reader.tensor_data(row), ref.reader.tensor_data(row)), row

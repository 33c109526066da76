"""``probe-tui export RUN --format msprobe``: our runs written as msprobe's dump.json trees (docs/EXPORT.md).

Round trip: the export, read back by our msprobe reader and compared with the run it came from, is clean; the
only rows that differ are those msprobe's backward conventions move (engines/dumps/msprobe/slot_order.py), and
those hold the run's values at the places the table says. Oracle: with msprobe installed in another Python
(``PROBE_TUI_MSPROBE_PYTHON``, e.g. /work/msprobe-venv/bin/python), msprobe's own compare reads two exports.
"""

import csv
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from engines.dumps.msprobe.slot_order import (
    backward_output_positions,
    msprobe_backward_outputs,
    transformed_shape,
)
from engines.dumps.names import parse_record
from engines.dumps.opener import open_dump
from probe_tui.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread_for_module")
MSPROBE_PYTHON = os.environ.get("PROBE_TUI_MSPROBE_PYTHON", "")


def _run(tmp: Path, task: str, steps: int) -> Path:
    cfg = tmp / (task + ".json")
    cfg.write_text(json.dumps({"task": task, "dump_path": str(tmp / task), "level": "mix",
                               "target": {"demo": {"preset": "tiny", "steps": steps}}}))
    assert main(["--run", str(cfg)]) == 0
    return tmp / task / "latest"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export_runs")
    return {"statistics": _run(tmp, "statistics", 2), "tensor": _run(tmp, "tensor", 1)}


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exports")
    out = {}
    for task, run in runs.items():
        out[task] = tmp / task
        assert main(["export", str(run), "--format", "msprobe", "-o", str(out[task])]) == 0
    return out


def _check_backward_layout(folder: Path, original, golden_reader) -> int:
    """Every backward API record of the export holds, at each place of msprobe's layout, the run's gradient the
    slot table names (shape transformed, statistics and tensor equal), read from dump.json itself (whatever our
    msprobe reader makes of it). Returns how many entries were checked."""
    from engines.dumps.msprobe.tensors import load_tensor_file

    data = json.loads((folder / "dump.json").read_text())["data"]
    index = {n: i for i, n in enumerate(original.name.tolist())}
    slots, inputs = {}, {}
    records = set(original.record.tolist())
    for i, (rec, slot) in enumerate(zip(original.record.tolist(), original.slot.tolist())):
        r = parse_record(rec)
        if r.kind == 0 and r.direction == 1:
            slots.setdefault(rec, []).append(slot)
        if r.kind == 0 and r.direction == 0 and slot.count(".") == 1 and slot.startswith("input.") \
                and original.is_tensor[i]:
            inputs.setdefault(rec, []).append((slot[6:], "float" in original.dtype[i]))
    checked = 0
    for rec, rec_slots in slots.items():
        heads = []
        for slot in rec_slots:
            if slot.startswith("output.") and slot.split(".")[1] not in heads:
                heads.append(slot.split(".")[1])
        ndim = len(json.loads(original.shape[index[rec + ".input.0"]])) if rec + ".input.0" in index else 0
        forward = rec[:-len("backward")] + "forward"
        fwd = inputs.get(forward, []) if forward in records else None  # None: the dump has no forward record
        sources = msprobe_backward_outputs(parse_record(rec).base, fwd, heads, ndim)
        outs = data[rec]["output"]
        assert len(outs) == len(sources), (rec, len(outs), sources)
        for entry, (slot, transform) in zip(outs, sources):
            if slot is None:
                assert entry is None, rec
                continue
            if isinstance(entry, list):  # a nested gradient: laid out as ours below its place
                continue
            j = index[rec + "." + slot]
            shape = json.loads(original.shape[j])
            assert entry["shape"] == transformed_shape(shape, transform), (rec, slot)
            for key in ("Max", "Min", "Mean", "Norm"):
                assert math.isclose(entry[key], getattr(original, key.lower())[j], rel_tol=1e-12), (rec, slot, key)
            if golden_reader is not None:
                a = load_tensor_file(folder / "dump_tensor_data" / entry["data_name"], mmap=False)
                b = golden_reader.read(int(original.data[j]), 0, int(original.numel[j])).reshape(shape)
                np.testing.assert_array_equal(a, b.T if transform == "T" else b.reshape(a.shape))
            checked += 1
    return checked


def _verdicts(target: Path, golden: Path, out: Path) -> dict:
    assert main(["compare", str(target), str(golden), "-o", str(out)]) == 0
    with open(next(out.glob("compare_result_*.csv")), newline="") as fh:
        return {(r["NPU Name"], r["Step"]): r for r in csv.DictReader(fh)}


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_round_trip_is_clean(task, runs, exports, tmp_path):
    rows = _verdicts(exports[task], runs[task], tmp_path / "cmp")
    golden, back = open_dump(runs[task]), open_dump(exports[task])
    assert back.ranks() == golden.ranks() and back.steps(0) == golden.steps(0)
    holds = back.holds()
    assert holds["tensor"] == (task == "tensor")
    checked = 0
    for step in golden.steps(0):
        original, exported = golden.rows(0, step), back.rows(0, step)
        golden_reader = golden.tensor_spec(0, step).open() if task == "tensor" else None
        checked += _check_backward_layout(exports[task] / "step{}".format(step) / "rank0", original, golden_reader)
        for i, name in enumerate(exported.name.tolist()):
            row = rows[(name, str(step))]
            rec = parse_record(str(exported.record[i]))
            if rec.kind == 0 and rec.direction == 1 and str(exported.slot[i]).startswith("output."):
                continue  # msprobe's backward layout: checked above, from dump.json
            assert row["Result"] == "pass", (name, row["Result"], row["Err_message"])
            if task == "tensor" and exported.numel[i] > 1 and "float" in exported.dtype[i]:
                assert row["Cosine"] == "1.0", (name, row["Cosine"])  # the tensors were read and agree
    assert checked > 50


def test_export_layout_and_names(runs, exports):
    folder = exports["tensor"] / "step0" / "rank0"
    dump = json.loads((folder / "dump.json").read_text())
    assert dump["task"] == "tensor" and dump["level"] == "mix" and dump["framework"] == "pytorch"
    assert Path(dump["dump_data_dir"]) == (folder / "dump_tensor_data").resolve()
    data = dump["data"]
    fwd = data["Functional.linear.0.forward"]
    assert set(fwd) == {"input_args", "input_kwargs", "output"}
    assert fwd["input_args"][0]["type"] == "torch.Tensor"
    assert fwd["input_args"][0]["data_name"] == "Functional.linear.0.forward.input.0.pt"
    bwd = data["Functional.linear.0.backward"]
    assert set(bwd) == {"input", "output"}
    # a 3-D input: torch flattens it, msprobe's one output is the flattened gradient of the result
    out_shape = fwd["output"][0]["shape"]
    assert [o["shape"] for o in bwd["output"]] == [[out_shape[0] * out_shape[1], out_shape[2]]]
    grads = data["Module.head.Linear.parameters_grad.0"] if "Module.head.Linear.parameters_grad.0" in data else next(
        v for k, v in data.items() if ".parameters_grad" in k)
    assert all(isinstance(v, list) and v[0]["type"] == "torch.Tensor" for v in grads.values())
    for entry in data.values():
        for leaf in _leaves(entry):
            if isinstance(leaf, dict) and "data_name" in leaf:
                assert (folder / "dump_tensor_data" / leaf["data_name"]).is_file()
    stacks = json.loads((folder / "stack.json").read_text())
    assert all(isinstance(v[0], list) and isinstance(v[1], list) for v in stacks.values())
    construct = json.loads((folder / "construct.json").read_text())
    assert construct["Functional.linear.0.forward"].startswith("Module.")


def _leaves(value):
    if isinstance(value, dict) and "type" not in value:
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def test_export_refuses_a_taken_folder_and_writes_nothing(runs, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["export", str(runs["statistics"]), "-o", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert main(["export", str(tmp_path / "missing"), "-o", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_msprobe_scalar_leaves_read_as_ours(tmp_path):
    """A slice and a torch.dtype argument in a msprobe dump.json read as our dumps hold them (text and type),
    so the same argument compares equal across the two tools (before: the slice's text was lost and the dtype
    read as ``<class 'str'>``)."""
    folder = tmp_path / "step0" / "rank0"
    folder.mkdir(parents=True)
    data = {"Tensor.__getitem__.0.forward": {"input_args": [{"type": "slice", "value": [None, 8, None]}],
                                             "input_kwargs": {"dtype": {"type": "torch.dtype",
                                                                        "value": "torch.float32"}},
                                             "output": []}}
    (folder / "dump.json").write_text(json.dumps({"task": "statistics", "framework": "pytorch", "data": data}))
    t = open_dump(tmp_path).rows(0, 0)
    got = {n: (d, x) for n, d, x in zip(t.name.tolist(), t.dtype.tolist(), t.text.tolist())}
    assert got["Tensor.__getitem__.0.forward.input.0"] == ("slice", "[None, 8, None]")
    assert got["Tensor.__getitem__.0.forward.input.dtype"] == ("torch.dtype", "torch.float32")


def test_backward_output_positions():
    """The layouts measured on msprobe 26.2.0 (engines/dumps/msprobe/slot_order.py)."""
    lin = [("0", True), ("1", True), ("2", True)]
    assert backward_output_positions("Functional.linear", lin, ["0", "1", "2"], 2) == {
        "2": (0, ""), "0": (1, ""), "1": (2, "T")}
    assert msprobe_backward_outputs("Functional.linear", lin, ["1", "2"], 2) == [
        ("output.2", ""), (None, ""), ("output.1", "T")]  # the input needs no gradient: null
    assert backward_output_positions("Functional.linear", lin[:2], ["0", "1"], 2) == {"0": (0, ""), "1": (1, "T")}
    assert msprobe_backward_outputs("Functional.linear", lin, ["0", "1", "2"], 3) == [("input.0", "flat2d")]
    assert msprobe_backward_outputs("Functional.linear", lin, ["0", "1", "2"], 1) == [("input.0", "row")]
    ln = [("0", True), ("weight", True), ("bias", True)]
    assert backward_output_positions("Functional.layer_norm", ln, ["0", "weight", "bias"]) == {
        "0": (0, ""), "weight": (1, ""), "bias": (2, "")}
    assert backward_output_positions("Functional.embedding", [("0", False), ("1", True)], ["1"]) == {"1": (0, "")}
    assert transformed_shape([2, 8, 32], "flat2d") == [16, 32] and transformed_shape([3], "row") == [1, 3]


def _msprobe_compare(target: Path, golden: Path, out: Path) -> list:
    out.mkdir()
    proc = subprocess.run([MSPROBE_PYTHON, "-m", "msprobe.msprobe", "compare", "--target_path", str(target),
                           "--golden_path", str(golden), "--output_path", str(out)],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    files = list(out.glob("compare_result_*.csv"))
    assert files, proc.stdout[-2000:]
    with open(files[0], newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.skipif(not MSPROBE_PYTHON, reason="PROBE_TUI_MSPROBE_PYTHON (a Python with msprobe) is not set")
@pytest.mark.slow
@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_msprobe_compare_reads_our_export(task, exports, tmp_path):
    """msprobe 26.2's own compare on two exports of one run (step folders): every row found, every row passes, and
    in tensor mode it read our tensor files (cosine 1.0)."""
    step = exports[task] / "step0"
    rows = _msprobe_compare(step, step, tmp_path / "out")
    ours = open_dump(exports[task]).rows(0, 0)
    assert len(rows) == len(ours)
    assert {r["Result"] for r in rows} == {"pass"}
    if task == "tensor":
        floats = [r for r in rows if "float" in r["NPU Dtype"] and r["NPU Tensor Shape"] not in ("[]", "N/A")]
        assert floats and all(r["Cosine"] == "1.0" for r in floats), [r["NPU Name"] for r in floats
                                                                       if r["Cosine"] != "1.0"][:5]


def test_npy_tensor_files_hold_the_same_values(runs, exports, tmp_path):
    """``--tensor-format npy`` (MindSpore runs, or no torch): .npy files, read back equal to the .pt export."""
    out = tmp_path / "npy"
    assert main(["export", str(runs["tensor"]), "-o", str(out), "--tensor-format", "npy"]) == 0
    names = sorted(p.name for p in (out / "step0" / "rank0" / "dump_tensor_data").iterdir())
    assert names and all(n.endswith(".npy") for n in names)
    a, b = open_dump(out).rows(0, 0), open_dump(exports["tensor"]).rows(0, 0)
    assert a.name.tolist() == b.name.tolist()
    ra, rb = open_dump(out).tensor_spec(0, 0).open(), open_dump(exports["tensor"]).tensor_spec(0, 0).open()
    for i in [i for i in range(len(a)) if a.data[i] >= 0][::50]:
        n = int(a.numel[i])
        np.testing.assert_array_equal(ra.read(int(a.data[i]), 0, n), rb.read(int(b.data[i]), 0, n))


DATA = Path(__file__).parent / "data" / "msprobe"


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """The model of tests/data/msprobe/make_real_dumps.py captured by us (tensor, mix) and exported."""
    import sys

    from probe_tui.debugger import PrecisionDebugger

    tmp_path = tmp_path_factory.mktemp("tiny")
    sys.path.insert(0, str(DATA))
    try:
        from make_real_dumps import batch, step, tiny_model
    finally:
        sys.path.remove(str(DATA))
    model = tiny_model()
    x, y = batch()
    debugger = PrecisionDebugger(task="tensor", dump_path=str(tmp_path / "ours"), level="mix")
    debugger.start(model)
    step(model, x, y)
    debugger.stop()
    debugger.step()
    run = next(p for p in (tmp_path / "ours").iterdir() if p.name.startswith("2"))
    assert main(["export", str(run), "-o", str(tmp_path / "exp")]) == 0
    return tmp_path / "exp"


def test_export_lays_out_backward_as_msprobe_26_does(tiny_export, tmp_path):
    """The same model captured by us and by msprobe 26.2.0 (tests/data/msprobe/real/tensor_mix): our export, compared
    with msprobe's dump, pairs every backward row of the linear layers by name and shape and they pass (ours are
    input, weight, bias against msprobe's bias, input, weightᵀ)."""
    from engines.compare.engine import run_compare

    out = run_compare({"compare": {"target_path": str(tiny_export), "golden_path": str(DATA / "real" / "tensor_mix"),
                                   "output_path": str(tmp_path / "cmp")}}, None)
    r = out.results
    linear = np.array([n.startswith("Functional.linear.") and ".backward.output." in n for n in r["target_name"]])
    # linear.0: bias, null (its input needs no gradient), weightᵀ; linear.1: bias, input, weightᵀ (a reader that
    # maps msprobe's layout back to ours may leave the null out)
    assert linear.sum() >= 5
    assert r["matched"][linear].all() and (r["verdict"][linear] == 0).all(), r["target_name"][linear]
    assert list(r["target_shape"][linear]) == list(r["golden_shape"][linear])


@pytest.mark.skipif(not MSPROBE_PYTHON, reason="PROBE_TUI_MSPROBE_PYTHON (a Python with msprobe) is not set")
@pytest.mark.slow
def test_msprobe_compare_of_our_export_against_its_own_dump(tiny_export, tmp_path):
    """msprobe 26.2's compare, our export (target) against its own dump of the same model (golden): every row pairs
    and passes but cross_entropy's backward, whose msprobe gradient is the inner nll_loss's (docs/EXPORT.md)."""
    import shutil

    golden = tmp_path / "golden" / "step0"
    shutil.copytree(DATA / "real" / "tensor_mix" / "step0", golden)
    proc = next(golden.iterdir())
    proc.rename(golden / "rank0")  # msprobe pairs rank folders by name; its single-process dump says proc<pid>
    rows = _msprobe_compare(tiny_export / "step0", golden, tmp_path / "out")
    failing = {r["NPU Name"] for r in rows if r["Result"] != "pass"}
    assert len(rows) >= 60
    assert failing == {"Functional.cross_entropy.0.backward.output.0"}, failing

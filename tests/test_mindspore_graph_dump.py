"""Graph-mode capture through MindSpore's e2e kernel dump (the one facility that works on the CPU:
docs/MINDSPORE.md "Graph mode"), converted into our dump: the MindSpore demo model trained in GRAPH_MODE with
``TrainOneStepCell`` (``tests/ms_graph_demo_script.py``), 2 tiny steps."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.mindspore, pytest.mark.slow]
pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from test_mindspore_support import Dump, Values, assert_stats_equal  # noqa: E402

from engines.adapters.mindspore.graph_kernels import iterations, parse_name, write_config  # noqa: E402
from engines.adapters.mindspore.graph_records import convert, grouped_steps  # noqa: E402
from engines.store.dump_writer import DumpWriter  # noqa: E402
from tests.dump_support import only_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "ms_graph_demo_script.py")


def _train(tmp_path, mode="graph", **env):
    done = subprocess.run([sys.executable, SCRIPT, mode], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
    assert done.returncode == 0, done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if line.startswith("loss ")]


def _dump_and_convert(tmp, mode):
    """The demo trained in ``mode`` under MindSpore's kernel dump (losses checked against a run without it), the
    raw dump converted: (raw folder, {rank: steps}, Dump of rank 0)."""
    config = write_config(str(tmp / "ms"))
    losses = _train(tmp, mode, MINDSPORE_DUMP_CONFIG=config)
    assert losses == _train(tmp, mode) and len(losses) == 2  # the kernel dump leaves the training as it was
    writers = {}

    def writer(rank):
        if rank not in writers:
            writers[rank] = DumpWriter(tmp / "dump" / ("rank%d" % rank), meta={"framework": "mindspore"})
        return writers[rank]

    done = convert(str(tmp / "ms" / "raw"), writer, save_tensors=True)
    for w in writers.values():
        w.close()
    return tmp / "ms" / "raw", done, Dump(tmp / "dump" / "rank0")


@pytest.fixture(scope="module")
def graph_dump(tmp_path_factory):
    raw, done, dump = _dump_and_convert(tmp_path_factory.mktemp("graph"), "graph")
    yield raw, done, dump
    dump.close()


def test_every_dumped_kernel_is_a_record_with_its_tensors(graph_dump):
    raw, done, dump = graph_dump
    assert dump.steps() == [0, 1] == sorted(done[0])
    for rank, _graph, it, folder in iterations(str(raw)):
        files = [parse_name(f) for f in os.listdir(folder)]
        kernels = {(p[0], p[1]) for p in files if p is not None}
        assert len(kernels) > 300  # forward, backward and the optimizer's kernels of the tiny demo
        assert done[rank][it] == (len(kernels), len([p for p in files if p is not None]))
        names = dump.names(it)
        assert len(names) == len(kernels) == len(set(names))
    names = dump.names(0)
    assert "Kernel.MatMul.0.forward" in names and any(n.endswith(".backward") for n in names)
    parents = set(dump._records["parent"])
    assert "Cell.net.blocks.0.ln1.LayerNorm.forward.0" in parents
    assert "Cell.net.blocks.0.attn.qkv.Linear.backward.0" in parents
    # the kernels MindSpore expands inline (mint's linear: Expand/_Dense/MatMul) are under their cell too
    assert dump.record("Kernel.MatMul.0.forward", 0)["parent"] == "Cell.net.blocks.0.attn.qkv.Linear.forward.0"
    assert "Cell.net.blocks.1.ln2.LayerNorm.forward.0" in parents and "Cell.net.ln_f.LayerNorm.forward.0" in parents
    modules = dump.reader.modules()
    tree = dict(zip(modules["name"], modules["parent"]))
    assert tree["net.blocks.1.ln2"] == "net.blocks.1" and tree["net.blocks"] == "net" and tree["net"] == ""


def test_every_kernel_whose_scope_names_a_cell_is_parented_to_it(graph_dump):
    """MindSpore names the kernels it expands inline ``Expand/_Dense/MatMul-op0`` (no cell): the graph's IR places
    them; a kernel a file names but the execution order lists under another number keeps its cell scope."""
    _raw, _done, dump = graph_dump
    recs = dump._records
    steps = np.asarray(recs["step"])
    orphans = []
    matmul_parents = []
    for i in np.flatnonzero(steps == 0).tolist():
        name, parent = str(recs["name"][i]), str(recs["parent"][i])
        scope = json.loads(recs["args"][i])["scope"]
        if name.startswith("Kernel.Parameter."):  # the graph's inputs and parameters, not kernels
            continue
        if scope.startswith("Expand/") or ("net-DemoGPT" in scope and not parent):
            orphans.append(scope)
        if name.startswith("Kernel.MatMul.") and name.endswith(".forward"):
            matmul_parents.append(parent)
    assert orphans == []
    # the 9 Linear layers' MatMul (mint's linear, expanded: Expand/_Dense) each under its Linear
    assert len(matmul_parents) == 9 and all(p.endswith(".Linear.forward.0") for p in matmul_parents)
    assert "Cell.net.blocks.1.mlp.fc2.Linear.forward.0" in matmul_parents
    assert "Cell.net.head.Linear.forward.0" in matmul_parents


def test_statistics_and_tensors_equal_the_kernels_values(graph_dump):
    raw, _done, dump = graph_dump
    _assert_rows_equal_kernel_files(raw, dump)


def test_jit_cell_kernels_equal_their_values_and_leave_the_losses_as_they_were(tmp_path):
    # the @jit MLP of a PyNative run: its kernels' statistics and tensors are the values MindSpore computed, and
    # the dump changes no loss (checked in _dump_and_convert)
    raw, done, dump = _dump_and_convert(tmp_path, "jit")
    try:
        assert sorted(done[0]) == [0, 1]
        assert "Kernel.Erf.0.forward" in dump.names()
        _assert_rows_equal_kernel_files(raw, dump)
    finally:
        dump.close()


def _assert_rows_equal_kernel_files(raw, dump):
    """Every stored tensor row's statistics and data equal the kernel file MindSpore wrote, and every file is one."""
    files = [os.path.join(folder, f) for _rank, _graph, _it, folder in iterations(str(raw))
             for f in os.listdir(folder) if parse_name(f) is not None]
    # each kernel file by (training step, op, scope as dumped, slot), in the order the kernels ran; with several
    # graphs (a @jit cell's forward, backward, update) the steps are the aligned ones (graph_records.
    # training_steps, tested on its own), and a parameter read by two graphs of a step has two files
    by_scope = {}
    for (_rank, step), ks in grouped_steps(str(raw)):
        for k in ks:
            for kt in k.tensors:
                key = (step, k.op_type, k.dumped_as or k.scope.replace("/", "_"), kt.slot)
                by_scope.setdefault(key, []).append((kt.path, kt.dtype))
    assert sorted(path for found in by_scope.values() for path, _ in found) == sorted(files)
    records = dump._records
    t = dump._tensors
    checked = 0
    for i in range(len(t["record"])):
        row = {k: v[i] for k, v in t.items()}
        r = int(np.nonzero(records["row"] == row["record"])[0][0])
        args = json.loads(records["args"][r])
        scope = args.get("dumped_as") or args["scope"].replace("/", "_")
        op = str(records["name"][r]).split(".")[1]
        path, dtype = by_scope[(int(records["step"][r]), op, scope, str(row["slot"]))].pop(0)
        arr = np.load(path)
        assert_stats_equal(row, Values(arr, dtype))
        stored = dump.reader.tensor_data(i)
        assert stored is not None and np.array_equal(stored, arr, equal_nan=True)
        checked += 1
    assert checked == len(files) and not any(by_scope.values())


def _run_l2(tmp_path, target, name="ms_static_l2_statistics.json", **fields):
    config = json.loads((ROOT / "tests" / "data" / "configs" / "msprobe" / name).read_text())
    config.update(dump_path=str(tmp_path / "dump"), target=target, **fields)
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    run = subprocess.run([sys.executable, "-m", "probe_tui", "run", str(tmp_path / "cfg.json")], cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    folder = only_run(tmp_path / "dump")
    return run, json.loads((folder / "run.json").read_text()), folder


def test_msprobe_l2_statistics_config_runs_a_graph_mode_script(tmp_path):
    run, meta, folder = _run_l2(tmp_path, {"script": SCRIPT, "args": ["graph"]})
    assert run.returncode == 0, run.stderr[-2000:]
    assert [line for line in run.stdout.splitlines() if line.startswith("loss ")] == _train(tmp_path)
    dump = Dump(folder / "rank0")
    assert dump.steps() == [0, 1]
    assert len(dump.names(1)) > 300 and all(n.startswith("Kernel.") for n in dump.names())
    assert meta["summary"]["records"] == len(dump.names())
    assert not (folder / "graph_raw").exists()  # the raw kernel dump is removed once converted
    dump.close()


def test_l2_captures_the_jit_graphs_of_a_pynative_run(tmp_path):
    run, meta, folder = _run_l2(tmp_path, {"script": SCRIPT, "args": ["jit"]})
    assert run.returncode == 0, run.stderr[-2000:]
    dump = Dump(folder / "rank0")
    names = dump.names()
    # the @jit MLP's gelu (Erf) ran as kernels; the PyNative rest of the model is not L2's
    assert "Kernel.Erf.0.forward" in names and not any("LayerNorm" in n for n in names)
    assert meta["summary"]["records"] == len(names)
    dump.close()


def test_l2_kernels_of_a_jit_cell_are_under_its_path_in_the_model(tmp_path):
    # a @jit cell's graph scopes start at that cell (Default/fc1-Linear for the jit MLP's fc1): its kernels are
    # parented under the cell's full path, as the PyNative records of the same run name it (before: Cell.fc1...,
    # and the MLP's own kernels at the root)
    (tmp_path / "l2").mkdir()
    run, _meta, folder = _run_l2(tmp_path / "l2", {"script": SCRIPT, "args": ["jit"]}, step=[0])
    assert run.returncode == 0, run.stderr[-2000:]
    dump = Dump(folder / "rank0")
    recs = dump._records
    # at the root: the SGD update's graph (the optimizer, no cell) and the Parameter files (not kernels)
    update = ("Kernel.Parameter.", "Kernel.SGD.", "Kernel.AssignAdd.")
    root = sorted({(str(n), str(a)) for n, a, p in zip(recs["name"], recs["args"], recs["parent"])
                   if not p and not str(n).startswith(update)})
    parents = [str(p) for p in recs["parent"] if p]
    modules = dump.reader.modules()
    tree = dict(zip(modules["name"], modules["parent"]))
    classes = dict(zip(modules["name"], modules["cls"]))
    dump.close()
    (tmp_path / "l0").mkdir()
    run, _meta, folder = _run_l2(tmp_path / "l0", {"script": SCRIPT, "args": ["jit"]}, level="L0", step=[0])
    assert run.returncode == 0, run.stderr[-2000:]
    pynative = Dump(folder / "rank0")
    pynative_classes = dict(zip(pynative.reader.modules()["name"], pynative.reader.modules()["cls"]))
    pynative_names = set(pynative.names())
    pynative.close()
    assert root == [], root
    assert parents and all(p.startswith("Cell.net.blocks.1.mlp.") for p in parents), sorted(set(parents))
    assert "Cell.net.blocks.1.mlp.fc1.Linear.forward.0" in parents
    assert "Cell.net.blocks.1.mlp.MLP.forward.0" in parents  # gelu's kernels: the MLP's own
    assert "Cell.net.blocks.1.mlp.MLP.backward.0" in parents
    # the cells as PyNative names them: the same paths and classes (fc1's gradient record: Cell.<path>.<class>)
    assert "Cell.net.blocks.1.mlp.fc1.Linear.parameters_grad.0" in pynative_names
    paths = {p[len("Cell."):].rsplit(".", 3)[0] for p in parents}
    assert paths <= set(pynative_classes), paths - set(pynative_classes)
    assert all(classes[p] == pynative_classes[p] for p in paths)
    assert tree["net.blocks.1.mlp.fc1"] == "net.blocks.1.mlp" and tree["net.blocks.1.mlp"] == "net.blocks.1"
    assert classes["net.blocks.1.mlp"] == "MLP" and tree["net"] == ""


def test_msprobe_l2_tensor_config_keeps_the_selected_step_and_its_tensors(tmp_path):
    run, meta, folder = _run_l2(tmp_path, {"script": SCRIPT, "args": ["graph"]}, "ms_static_l2_tensor.json",
                                step=[1])
    assert run.returncode == 0, run.stderr[-2000:]
    dump = Dump(folder / "rank0")
    assert dump.steps() == [1]  # MindSpore dumped iteration 1 only
    rows = dump.rows("Kernel.LayerNorm.0.forward", 1)
    stored = dump.reader.tensor_data(int(rows["output.0"]["row"]))
    assert stored is not None and stored.shape == (2, 8, 32) and float(stored.max()) == rows["output.0"]["max"]
    dump.close()


def test_l2_statistics_summary_names_where_non_finite_values_start(tmp_path):
    # the demo's float16 overflow in block 1: the summary's "non finite" line and table come from the kernels'
    # nan/inf counts, as at L1 (engines/capture/highlights.py)
    run, meta, _folder = _run_l2(tmp_path, {"script": SCRIPT, "args": ["graph", "fp16_overflow"]}, step=[0])
    assert run.returncode == 0, run.stderr[-2000:]
    summary = meta["summary"]
    assert "produced" in summary["non_finite"], summary["non_finite"]
    table = [t for t in summary["tables"] if t["title"].startswith("where non-finite values start")]
    assert table and table[0]["rows"][0][:2] == ["Kernel.Exp.0.forward.output.0", 0], table


def test_l2_statistics_summary_counts_the_masks_rows_as_not_produced(tmp_path):
    run, meta, _folder = _run_l2(tmp_path, {"script": SCRIPT, "args": ["graph"]}, step=[0])
    assert run.returncode == 0, run.stderr[-2000:]
    line = meta["summary"]["non_finite"]
    # the causal mask's -inf: masked_fill's dumped scalar fill, its output and the softmax reading it
    assert line != "none" and "produced" not in line, line


def test_l2_steps_of_a_pynative_run_with_jit_graphs_are_training_steps(tmp_path):
    # the jit MLP's forward, its backward and the SGD update are three graphs with their own iteration
    # counters (the last two one ahead of the first): each training step holds all three, also when one step
    # is selected (before, step 0 held the forward alone, and a selected step 1 held step 0's kernels)
    squares = {}
    for label, step in (("all", None), ("one", [1])):
        fields = {"step": step} if step else {}
        (tmp_path / label).mkdir()
        run, meta, folder = _run_l2(tmp_path / label, {"script": SCRIPT, "args": ["jit"]}, **fields)
        assert run.returncode == 0, run.stderr[-2000:]
        dump = Dump(folder / "rank0")
        assert dump.steps() == (step or [0, 1])
        for s in dump.steps():
            names = dump.names(s)
            assert "Kernel.Erf.0.forward" in names and any(n.endswith(".backward") for n in names)
            assert "Kernel.SGD.0.forward" in names  # the update that closes the step
            assert len(names) == len(set(names))
            # the backward of this step's forward: gelu's gradient (its x**2, a kernel MindSpore expands in the
            # backward graph: Kernel.Pow.0.backward, placed under Gradients/ from the IR) reads the input of this
            # step's forward Erf
            square = dump.rows("Kernel.Erf.0.forward", s)["input.0"]["norm"]
            assert dump.rows("Kernel.Pow.0.backward", s)["input.0"]["norm"] == square
            squares[(label, s)] = square
        dump.close()
    assert squares[("one", 1)] == squares[("all", 1)] != squares[("all", 0)]

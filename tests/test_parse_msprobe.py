"""Reading msprobe dumps: flattening (docs/reference/msprobe-analysis.md §1.5, §8.5), layouts, companions, safe tensor loading."""

import json
import pickle

import numpy as np
import pytest

from engines.dumps.msprobe.flatten import Flattener
from engines.dumps.msprobe.layout import find_dump_files
from engines.dumps.msprobe.tensors import TensorFileError, load_tensor_file
from engines.dumps.opener import open_dump
from engines.dumps.rows import IO_INPUT, IO_OUTPUT, IO_PARAM, IO_PARAM_GRAD, KIND_MODULE, KIND_PARAM_GRAD
from engines.dumps.scalars import scalar_crc32
from engines.dumps.source import DumpSourceError


def tensor(shape=(2, 2), dtype="torch.float32", **extra):
    leaf = {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": 1.0, "Min": -1.0, "Mean": 0.0,
            "Norm": 2.0, "requires_grad": False}
    leaf.update(extra)
    return leaf


def flatten(data, parents=None, stacks=None):
    files = []
    return Flattener(step=0, rank=0, parents=parents or {}, stacks=stacks or {},
                     file_index=lambda n: files.append(n) or len(files) - 1).flatten(data)


@pytest.mark.parametrize("value,crc", [(1, "83dcefb7"), (True, "5dcee3b3"), (None, "dfa2aff1"),
                                       ([0, 1], "77849d8c")])
def test_scalar_crc32_vectors(value, crc):
    assert scalar_crc32(value) == crc


def test_max_pool2d_rows_in_order():
    data = {"Functional.max_pool2d.0.forward": {
        "input_args": [tensor(), {"type": "int", "value": 3}, {"type": "int", "value": 2},
                       {"type": "int", "value": 1}, {"type": "int", "value": 1}],
        "input_kwargs": {"ceil_mode": {"type": "bool", "value": False},
                         "return_indices": {"type": "bool", "value": False}},
        "output": [tensor()]}}
    rows = flatten(data)
    base = "Functional.max_pool2d.0.forward."
    assert rows.name.tolist() == [base + s for s in ("input.0", "input.1", "input.2", "input.3", "input.4",
                                                     "input.ceil_mode", "input.return_indices", "output.0")]
    assert rows.dtype[1] == "<class 'int'>" and rows.shape[1] == "[]" and rows.max[1] == 3.0
    assert rows.text[5] == "False" and rows.crc32[1] == scalar_crc32(3)
    assert rows.io.tolist() == [IO_INPUT] * 7 + [IO_OUTPUT]
    assert rows.is_tensor.tolist() == [True] + [False] * 6 + [True]


def test_nested_dict_argument():
    data = {"Functional.f.0.forward": {"input_args": [tensor(), {"y": tensor(), "y_mask": tensor(),
                                                                 "x_mask": tensor(),
                                                                 "data_info": {"img_hw": None}}],
                                       "input_kwargs": {}, "output": []}}
    names = flatten(data).name.tolist()
    assert names[1:] == ["Functional.f.0.forward.input.1." + s
                         for s in ("y", "y_mask", "x_mask", "data_info.img_hw")]


def test_module_parameters_and_grads():
    data = {
        "Module.l1.Linear.forward.0": {"input_args": [tensor()], "input_kwargs": {}, "output": [tensor()],
                                       "parameters": {"weight": tensor(), "bias": tensor((2,))}},
        "Module.l1.Linear.parameters_grad": {"weight": [tensor()], "bias": [tensor((2,))]},
        "Module.l1.Linear.backward.0": {"input": [tensor()], "output": [tensor()]},
    }
    rows = flatten(data, parents={"Module.l1.Linear.forward.0": None})
    assert rows.name.tolist() == [
        "Module.l1.Linear.forward.0.input.0", "Module.l1.Linear.forward.0.parameters.weight",
        "Module.l1.Linear.forward.0.parameters.bias", "Module.l1.Linear.forward.0.output.0",
        "Module.l1.Linear.parameters_grad.weight", "Module.l1.Linear.parameters_grad.bias",
        "Module.l1.Linear.backward.0.input.0", "Module.l1.Linear.backward.0.output.0"]
    assert rows.io.tolist()[:6] == [IO_INPUT, IO_PARAM, IO_PARAM, IO_OUTPUT, IO_PARAM_GRAD, IO_PARAM_GRAD]
    assert rows.kind[0] == KIND_MODULE and rows.kind[4] == KIND_PARAM_GRAD


def test_scalar_kinds():
    data = {"Distributed.all_reduce.0.forward": {"input_args": [tensor()], "input_kwargs": {
        "group": {"type": "torch.ProcessGroup", "group_ranks": [0, 1, 2, 3], "group_id": "x"},
        "dst": {"type": "int", "value": 1},
        "shape": {"type": "torch.Size", "value": [2, 3]},
        "device": {"type": "torch.device", "value": "npu:0"},
        "dtype": {"type": "torch.dtype", "value": "torch.float16"}}, "output": []}}
    rows = flatten(data)
    by = dict(zip([n.rsplit(".", 1)[-1] for n in rows.name], range(len(rows))))
    assert rows.text[by["group"]] == "[0, 1, 2, 3]"
    assert rows.text[by["dst"]] == "1"
    assert rows.dtype[by["shape"]] == "torch.Size" and rows.shape[by["shape"]] == "[2, 3]"
    assert rows.text[by["device"]] == "npu:0" and rows.text[by["dtype"]] == "torch.float16"


def _write_dump(folder, data, task="statistics"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dump.json").write_text(json.dumps({"task": task, "level": "L1", "framework": "pytorch",
                                                  "dump_data_dir": None, "data": data}))


def test_layouts_single_multi_rank_multi_step(tmp_path):
    data = {"Functional.relu.0.forward": {"input_args": [tensor()], "input_kwargs": {}, "output": [tensor()]}}
    for step in (0, 2):
        for rank in (0, 3):
            _write_dump(tmp_path / "dump" / "step{}".format(step) / "rank{}".format(rank), data)
    files = find_dump_files(tmp_path / "dump")
    assert [(f.step, f.rank) for f in files] == [(0, 0), (0, 3), (2, 0), (2, 3)]
    assert [(f.step, f.rank) for f in find_dump_files(tmp_path / "dump" / "step2")] == [(2, 0), (2, 3)]
    one = find_dump_files(tmp_path / "dump" / "step2" / "rank3" / "dump.json")
    assert [(f.step, f.rank) for f in one] == [(2, 3)]
    src = open_dump(tmp_path / "dump")
    assert src.ranks() == [0, 3] and src.steps(3) == [0, 2]
    assert src.rows(3, 2).step.tolist() == [2, 2] and src.rows(3, 2).rank.tolist() == [3, 3]
    _write_dump(tmp_path / "solo" / "rank", data)
    assert [(f.step, f.rank) for f in find_dump_files(tmp_path / "solo" / "rank")] == [(0, 0)]
    _write_dump(tmp_path / "wheel" / "step0" / "proc1234", data)
    assert [(f.step, f.rank) for f in find_dump_files(tmp_path / "wheel")] == [(0, 0)]


def test_companions_give_stack_and_parent(tmp_path):
    data = {"Module.l1.Linear.forward.0": {"input_args": [tensor()], "input_kwargs": {}, "output": [tensor()]},
            "Functional.linear.0.forward": {"input_args": [tensor()], "input_kwargs": {}, "output": [tensor()]}}
    folder = tmp_path / "rank0"
    _write_dump(folder, data)
    (folder / "construct.json").write_text(json.dumps({"Module.l1.Linear.forward.0": None,
                                                       "Functional.linear.0.forward": "Module.l1.Linear.forward.0"}))
    (folder / "stack.json").write_text(json.dumps({"0": [["Functional.linear.0.forward"],
                                                         ["File a.py, line 3, in forward", "y = F.linear(x)"]]}))
    rows = open_dump(folder).rows(0, 0)
    assert rows.parent.tolist() == ["", "", "Module.l1.Linear.forward.0", "Module.l1.Linear.forward.0"]
    assert rows.stack[2] == "File a.py, line 3, in forward\ny = F.linear(x)"


def test_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(DumpSourceError, match="no such file or folder") as err:
        open_dump(tmp_path / "missing")
    assert "\n" not in str(err.value) and str(tmp_path / "missing") in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpSourceError, match="neither a probe-tui dump"):
        open_dump(tmp_path / "empty")
    bad = tmp_path / "bad" / "rank0"
    bad.mkdir(parents=True)
    (bad / "dump.json").write_text("{not json")
    with pytest.raises(DumpSourceError, match="not valid JSON"):
        open_dump(bad).rows(0, 0)


def test_npy_files_never_unpickle(tmp_path):
    good = tmp_path / "a.npy"
    np.save(good, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert load_tensor_file(good).tolist() == [[0, 1, 2], [3, 4, 5]]
    evil = tmp_path / "evil.npy"
    np.save(evil, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(TensorFileError, match="cannot read"):
        load_tensor_file(evil)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pt_files_load_weights_only(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "t.pt"
    torch.save(torch.tensor([1.0, 2.5], dtype=torch.bfloat16), path)
    arr = load_tensor_file(path)
    assert arr.dtype == np.float32 and arr.tolist() == [1.0, 2.5]

    class Payload:
        def __reduce__(self):
            return (print, ("pwned",))

    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as fh:
        pickle.dump(Payload(), fh)
    with pytest.raises(TensorFileError, match="cannot load"):
        load_tensor_file(evil)


# -- a damaged msprobe dump: one line naming the file and, for a value of the wrong type, the record and field ---
from engines.errors import BadInputError  # noqa: E402
from engines.parse.inspect import parse, read_tensor  # noqa: E402
from tests import damage  # noqa: E402

LINEAR = "Functional.linear.0.forward"


def _tensor_dump(folder):
    """A one-record tensor dump: dump.json plus its two .npy files."""
    (folder / "dump_tensor_data").mkdir(parents=True)
    leaves = []
    for slot in ("input.0", "output.0"):
        name = "{}.{}.npy".format(LINEAR, slot)
        np.save(folder / "dump_tensor_data" / name, np.arange(4, dtype=np.float32))
        leaves.append(tensor(shape=(4,), data_name=name))
    _write_dump(folder, {LINEAR: {"input_args": [leaves[0]], "input_kwargs": {}, "output": [leaves[1]]}})
    return folder


@pytest.mark.parametrize("field,value,said", [
    ("Max", "abc", 'input_args[0].Max: expected a number, got "abc"'),
    ("Max", [1], "input_args[0].Max: expected a number, got [1]"),
    ("Max", 10 ** 400, "input_args[0].Max: expected a number"),
    ("shape", "abc", 'input_args[0].shape: expected a list of non-negative integers, got "abc"'),
    ("shape", [[1], 2], "input_args[0].shape: expected a list of non-negative integers"),
    ("shape", 5, "input_args[0].shape: expected a list of non-negative integers, got 5"),
    ("shape", [-1, 3], "input_args[0].shape: expected a list of non-negative integers, got [-1, 3]"),
    ("shape", [1 << 40, 1 << 40], "input_args[0].shape: 1208925819614629174706176 elements"),
    ("dtype", 5, "input_args[0].dtype: expected a string, got 5"),
    ("data_name", [1], "input_args[0].data_name: expected a file name, got [1]"),
    ("md5", [1], "input_args[0].md5: expected a string, got [1]"),
])
def test_a_value_of_the_wrong_type_names_its_record_and_field(tmp_path, field, value, said):
    folder = _tensor_dump(tmp_path / "rank0")
    damage.edit_dump_json(folder / "dump.json", lambda d: damage.first_tensor_leaf(d["data"]).update({field: value}))
    with pytest.raises(BadInputError) as err:
        parse(folder)
    text = str(err.value)
    assert damage.one_line_error(text), text
    assert text.startswith(str(folder / "dump.json") + ': data["Functional.linear.0.forward"].' + said.split(".")[0])
    assert said in text, text


@pytest.mark.parametrize("what,edit,said", [
    ("not UTF-8", lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()), "not valid JSON"),
    ("nested deeper than Python reads", lambda p: p.write_bytes(b"[" * 100000 + b"]" * 100000),
     "nested deeper"),
    ("a record that is a list", lambda p: damage.edit_dump_json(p, lambda d: d["data"].update({LINEAR: [1]})),
     'data["Functional.linear.0.forward"]: expected an object'),
    ("framework a number", lambda p: damage.edit_dump_json(p, lambda d: d.update(framework=5)), None),
])
def test_a_damaged_dump_json_is_one_line_or_read(tmp_path, what, edit, said):
    folder = _tensor_dump(tmp_path / "rank0")
    edit(folder / "dump.json")
    if said is None:  # the data is intact: read it
        assert parse(folder).summary["rows"] == 2
        return
    with pytest.raises(BadInputError) as err:
        parse(folder)
    assert damage.one_line_error(str(err.value)) and said in str(err.value), str(err.value)


TENSOR_DAMAGE = {
    "missing": lambda p: p.unlink(),
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:20]),
    "garbage": lambda p: p.write_bytes(b"garbage" * 10),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("what", sorted(TENSOR_DAMAGE))
def test_an_unreadable_tensor_file_is_one_line_for_row_and_export(tmp_path, what, capsys):
    from probe_tui.cli import main

    folder = _tensor_dump(tmp_path / "rank0")
    TENSOR_DAMAGE[what](folder / "dump_tensor_data" / "{}.input.0.npy".format(LINEAR))
    with pytest.raises(BadInputError) as err:
        read_tensor(folder, LINEAR + ".input.0")
    assert damage.one_line_error(str(err.value)) and "input.0.npy" in str(err.value)
    for argv in (["parse", str(folder), "--row", LINEAR + ".input.0"],
                 ["parse", str(folder), "--export-npy", str(tmp_path / "npy")]):
        assert main(argv) == 2
        err_text = capsys.readouterr().err
        assert err_text.startswith("probe-tui: error: ") and damage.one_line_error(err_text), err_text


def test_a_data_name_outside_dump_tensor_data_is_not_read(tmp_path):
    folder = _tensor_dump(tmp_path / "rank0")
    np.save(tmp_path / "secret.npy", np.arange(4, dtype=np.float32))
    damage.edit_dump_json(folder / "dump.json",
                          lambda d: damage.first_tensor_leaf(d["data"]).update(data_name="../../secret.npy"))
    with pytest.raises(BadInputError, match="not a file name in it"):
        read_tensor(folder, LINEAR + ".input.0")

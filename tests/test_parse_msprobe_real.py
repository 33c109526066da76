"""Dumps written by msprobe 26.2.0 itself (tests/data/msprobe/real, produced by make_real_dumps.py): our reader
and compare on real files — proc<pid> folders, construct.json at mix, stack.json, md5, .pt tensors."""

from pathlib import Path

import numpy as np
import pytest

from engines.compare.engine import run_compare
from engines.dumps.opener import open_dump
from engines.parse.inspect import parse, read_tensor

REAL = Path(__file__).parent / "data" / "msprobe" / "real"


def test_real_dumps_read_as_rows():
    tensor, md5, l1 = (open_dump(REAL / n) for n in ("tensor_mix", "stats_md5_mix", "stats_l1_scaled"))
    assert tensor.ranks() == [0] and tensor.steps(0) == [0] and tensor.framework == "pytorch"
    assert tensor.holds() == {"tensor": True, "statistics": True, "md5": False}
    assert md5.holds()["md5"] and not l1.holds()["md5"]
    rows = tensor.rows(0, 0)
    names = rows.name.tolist()
    assert names[:3] == ["Functional.linear.0.forward.input.0", "Functional.linear.0.forward.input.1",
                         "Functional.linear.0.forward.input.2"]
    assert "Module.0.Linear.forward.0.parameters.weight" in names
    i = names.index("Functional.linear.0.forward.input.0")
    assert rows.parent[i] == "Module.0.Linear.forward.0" and "File " in rows.stack[i]
    assert set(rows.record[rows.kind == 1].tolist()) >= {"Module.0.Linear.forward.0", "Module.2.Linear.forward.0"}


def test_real_pt_tensors_load_with_weights_only():
    pytest.importorskip("torch")
    w = read_tensor(REAL / "tensor_mix", "Module.0.Linear.forward.0.parameters.weight")
    assert w.shape == (8, 4) and w.dtype == np.float32
    rows = parse(REAL / "tensor_mix", name="Module.0.Linear.forward.0.parameters.weight").summary["listed"][0]
    assert rows["max"] == pytest.approx(float(w.max())) and rows["norm"] == pytest.approx(np.linalg.norm(w),
                                                                                          rel=1e-6)


@pytest.mark.parametrize("target,golden,mode", [("tensor_mix", "tensor_mix", "tensor"),
                                                ("stats_md5_mix", "stats_md5_mix", "md5"),
                                                ("stats_md5_mix", "tensor_mix", "statistics")])
def test_a_real_dump_against_itself_passes(tmp_path, target, golden, mode):
    if mode == "tensor":
        pytest.importorskip("torch")
    out = run_compare({"compare": {"target_path": str(REAL / target), "golden_path": str(REAL / golden),
                                   "mode": mode, "output_path": str(tmp_path / "o"), "formats": ["csv"]}}, None)
    assert out.summary["verdicts"]["pass"] == out.summary["rows"] == 72
    assert out.top_suspects == []


def test_a_changed_scale_is_found_with_its_argument(tmp_path):
    out = run_compare({"compare": {"target_path": str(REAL / "stats_l1_scaled"),
                                   "golden_path": str(REAL / "stats_md5_mix"),
                                   "output_path": str(tmp_path / "o"), "formats": ["csv"]}}, None)
    assert out.summary["mode"] == "statistics"
    assert out.summary["golden_only_rows"] > 0  # the golden is a mix dump: its module rows have no partner
    top = out.top_suspects[0]
    assert top["record"] == "Tensor.__mul__.0.forward" and top["changed_args"] == "input.1: 1.01 -> 1"

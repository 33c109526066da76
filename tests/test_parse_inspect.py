"""The parse API on a msprobe tensor dump: listing, filters, slices, histograms, .npy export, ``cn``."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engines.parse.inspect import (
    ParseError,
    compare_tensors,
    histogram,
    parse,
    parse_index,
    read_tensor,
    tensor_slice,
)

DATA = Path(__file__).parent / "data" / "msprobe" / "e2e_83"


@pytest.fixture()
def dump(tmp_path):
    root = tmp_path / "npu"
    shutil.copytree(DATA / "npu", root)
    return root


def test_lists_every_row_with_statistics(dump):
    out = parse(dump)
    assert out.summary["origin"] == "msprobe" and out.summary["rows"] == 6 and out.summary["records"] == 3
    first = out.summary["listed"][0]
    assert first["name"] == "Functional.relu.0.forward.input.0"
    assert (first["max"], first["min"], first["mean"]) == (4.0, 1.0, 2.5) and first["has_data"]
    assert out.summary["holds"]["tensor"] is True
    json.dumps(out.summary)


def test_name_filters(dump):
    assert parse(dump, name="softmax").summary["rows"] == 2
    assert parse(dump, name="*.output.0").summary["rows"] == 3
    assert parse(dump, name="re:^Functional\\.(relu|matmul)\\.0\\.forward\\.input").summary["rows"] == 2
    with pytest.raises(ParseError, match="bad regular expression"):
        parse(dump, name="re:(")


def test_step_and_rank_filters(dump):
    assert parse(dump, step=0, rank=0).summary["rows"] == 6
    with pytest.raises(ParseError, match="--step 4"):
        parse(dump, step=4)
    with pytest.raises(ParseError, match="--rank 2"):
        parse(dump, rank=2)


def test_nonfinite_filter(dump):
    path = dump / "step0" / "rank0" / "dump.json"
    raw = json.loads(path.read_text())
    raw["data"]["Functional.softmax.0.forward"]["output"][0]["Max"] = float("inf")
    path.write_text(json.dumps(raw))
    out = parse(dump, nonfinite=True)
    assert [r["name"] for r in out.summary["listed"]] == ["Functional.softmax.0.forward.output.0"]
    assert out.summary["listed"][0]["max"] == "inf"


def test_tensors_slices_and_histograms(dump):
    name = "Functional.matmul.0.forward.output.0"
    assert read_tensor(dump, name).tolist() == [10, 20, 30, 40]
    assert tensor_slice(dump, name, "1:3").tolist() == [20, 30]
    assert tensor_slice(dump, name, "::-1").tolist() == [40, 30, 20, 10]
    h = histogram(dump, name, bins=3)
    assert h.counts.tolist() == [1, 1, 2] and h.edges[0] == 10 and h.edges[-1] == 40 and h.nan == 0
    with pytest.raises(ParseError, match="no row named"):
        read_tensor(dump, "Functional.nope.0.forward.output.0")
    with pytest.raises(ParseError, match="index"):
        parse_index("__import__('os')")


def test_export_npy(dump, tmp_path):
    out = parse(dump, name="output", export_npy=tmp_path / "npy")
    assert out.summary["exported"] == 3
    arr = np.load(tmp_path / "npy" / "Functional.softmax.0.forward.output.0.npy")
    assert arr.dtype == np.float32 and arr.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_cn_vector():
    a = np.array([1, 2, 3], np.float32)
    b = np.array([1.0005, 2.01, 3], np.float32)
    c = compare_tensors(a, b, rtol=0.001, atol=0.001)
    assert c.allclose is False
    assert c.cosine == pytest.approx(0.9999975, abs=5e-7)
    assert c.error_ratio == pytest.approx(1 / 3) and [e[0] for e in c.first_errors] == [1]


def test_cn_pads_the_shorter_array():
    c = compare_tensors(np.array([1.0, 2.0]), np.array([1.0, 2.0, 0.0]))
    assert c.padded and c.allclose and c.total == 3

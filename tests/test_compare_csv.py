"""The CSV report's byte-level writer: numbers exactly as Python's repr writes them, text quoted as CSV needs,
every cell equal to what the xlsx report (cell by cell) holds, and the background writer process."""

import csv
import io
import math
import os
import struct
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.compare import csv_out
from engines.compare.columns import report_headers
from engines.compare.float_text import float_frames
from engines.compare.report_cells import report_rows
from engines.compare.verdicts import ERROR, PASS, UNMATCHED, WARNING


def texts(values):
    frame = float_frames(np.asarray(values, dtype=np.float64))
    return [bytes(row).replace(b"\0", b"").decode("ascii") for row in frame]


def check_repr(values):
    values = np.asarray(values, dtype=np.float64)
    got = texts(values)
    want = [repr(v) for v in values.tolist()]
    bad = [(w, g) for w, g in zip(want, got) if w != g]
    assert not bad, bad[:5]


def test_float_text_matches_repr_over_magnitudes_and_kinds():
    rng = np.random.default_rng(3)
    n = 40_000
    check_repr(rng.random(n) * 10)
    check_repr(np.exp(rng.normal(0, 40, n)) * rng.choice([-1.0, 1.0], n))  # 1e-50 .. 1e50, both signs
    check_repr(rng.standard_normal(n).astype(np.float32).astype(np.float64))  # float32 statistics
    check_repr(rng.integers(-10 ** 17, 10 ** 17, n).astype(np.float64))
    check_repr(np.ldexp(1.0, rng.integers(-1074, 1023, n)))  # powers of two: lopsided rounding intervals
    bits = rng.integers(0, 2 ** 63, n, dtype=np.uint64) | (rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63))
    check_repr(bits.view(np.float64))  # every bit pattern: subnormals, inf, nan included
    short = [float("%.*g" % (p, v)) for p, v in zip(rng.integers(1, 17, n).tolist(),
                                                    (rng.standard_normal(n) * 10.0 ** rng.integers(-25, 25, n)).tolist())]
    check_repr(short)  # values with short texts (1-16 digits)


def test_float_text_edge_values():
    check_repr([0.0, -0.0, math.inf, -math.inf, math.nan, 1e16, 9999999999999998.0, 1e15, 1e-4, 1e-5, 0.0001234,
                0.00012345678901234567, 1e22, 1e23, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                0.1, 0.2, 0.3, 1 / 3, 2 / 3, 0.5, 0.25, 9.5, 99.99999999999999, 999999999999999.9, 1e200, 1e-200,
                9.999999999999999e199, 1.0000000000000001e-200, 123456789012345678.0, -1.5e-7, 2.0 ** 60])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=50))
def test_float_text_any_floats(values):
    check_repr(values)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2 ** 64 - 1))
def test_float_text_any_bits(bits):
    check_repr([struct.unpack("<d", struct.pack("<Q", bits))[0]])


def result_table(n=300, seed=5):
    """A result table with what the report must get right: quoting, formula-looking names, unmatched rows,
    tokens, inf/nan, scalars with text, reasons, stacks."""
    rng = np.random.default_rng(seed)
    obj = lambda items: np.array(items, dtype=object)  # noqa: E731
    records = ["Functional.linear.{}.forward".format(i // 3) for i in range(n)]
    records[6:9] = ["=Module.a,b.Lin\"ear.forward.0"] * 3
    records[9:12] = ["Functional.über.0.forward"] * 3
    slots = ["input.0", "input.1", "output.0"] * (n // 3)
    names = [r + "." + s for r, s in zip(records, slots)]
    matched = rng.random(n) > 0.1
    golden = [nm if m else "" for nm, m in zip(names, matched)]
    golden[1] = "Functional.linear.0.forward.input.7"
    verdict = rng.choice([PASS, WARNING, ERROR], n).astype(np.uint8)
    verdict[~matched] = UNMATCHED
    reasons = ["" if v == PASS else "rel_err 0.3 > 0.1, \"max\"" for v in verdict.tolist()]
    reasons[4] = "@line1\nline2"
    values = {}
    for side in ("t", "g"):
        for s in ("max", "min", "mean", "norm"):
            v = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
            v[rng.random(n) < 0.02] = np.inf
            v[rng.random(n) < 0.02] = np.nan
            values[side + "_" + s] = v
    t_text = obj([None] * n)
    t_text[10] = "cpu"
    t_text[11] = "a, quoted \"text\""
    stats = {}
    for s in ("max", "min", "mean", "norm"):
        with np.errstate(invalid="ignore"):
            stats[s + "_diff"] = values["t_" + s] - values["g_" + s]
            stats[s + "_rel"] = np.abs(stats[s + "_diff"]) / np.abs(values["g_" + s])
        stats[s + "_note"] = rng.choice([0, 0, 0, 1, 2], n).astype(np.uint8)
    cols = {
        "rank": np.zeros(n, np.int64), "step": np.full(n, 3, np.int64), "order": np.arange(n),
        "target_name": obj(names), "golden_name": obj(golden), "record": obj(records), "slot": obj(slots),
        "target_dtype": obj(["torch.float32"] * n), "golden_dtype": obj(["torch.bfloat16" if m else "" for m in matched]),
        "target_shape": obj(["[8, 64]"] * n), "golden_shape": obj(["[8, 64]" if m else "" for m in matched]),
        "target_requires_grad": rng.integers(-1, 2, n).astype(np.int8),
        "golden_requires_grad": rng.integers(-1, 2, n).astype(np.int8),
        "requires_grad_equal": rng.integers(-1, 2, n).astype(np.int8),
        "t_valid": np.where(rng.random(n) < 0.05, 7, 15).astype(np.uint8), "g_valid": np.full(n, 15, np.uint8),
        "t_text": t_text, "g_text": obj([None] * n), "matched": matched, "verdict": verdict, "reasons": obj(reasons),
        "rel_err": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)),
        "stack": obj(["File \"a.py\", line {}, in f".format(i // 3) for i in range(n)]),
        "target_crc32": obj(["{:08x}".format(i) for i in range(n)]), "golden_crc32": obj([""] * n),
        "data_name": obj(["-1"] * n),
    }
    cols.update(values)
    cols.update(stats)
    return cols


def reference_csv(cols, mode, stack):
    """The report cell by cell: the xlsx report's cells, numbers through repr, CSV quoting by the csv module."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in report_rows(cols, mode, stack=stack, classic=False):
        writer.writerow([repr(c) if isinstance(c, float) else str(c) for c in row])
    return buf.getvalue()


@pytest.mark.parametrize("stack", [False, True])
def test_csv_equals_the_cell_by_cell_report(tmp_path, stack):
    cols = result_table()
    path = csv_out.write_csv(tmp_path / "r.csv", cols, "statistics", stack=stack, classic=False)
    got = path.read_text(encoding="utf-8")
    assert got == reference_csv(cols, "statistics", stack)
    rows = list(csv.DictReader(io.StringIO(got)))
    assert list(rows[0]) == list(report_headers("statistics", stack=stack, classic=False))
    assert rows[6]["NPU Name"] == "'=Module.a,b.Lin\"ear.forward.0.input.0"
    assert rows[4]["Err_message"] == "'@line1\nline2"
    assert rows[11]["NPU max"] == "a, quoted \"text\""
    if stack:
        assert rows[3]["NPU_Stack_Info"] == "File \"a.py\", line 1, in f" and rows[4]["NPU_Stack_Info"] == ""
    assert not (tmp_path / "r.csv.partial").exists()


def test_csv_in_a_background_process_equals_the_inline_one(tmp_path, monkeypatch):
    cols = result_table(n=3000, seed=8)
    inline = csv_out.write_csv(tmp_path / "a.csv", cols, "statistics", stack=True, classic=False).read_bytes()
    monkeypatch.setattr(csv_out, "BACKGROUND_ROWS", 100)
    monkeypatch.setattr(csv_out, "BLOCK_ROWS", 256)
    parent, in_parent = os.getpid(), []
    real = csv_out.rows_bytes

    def counted(fields, lo, hi):
        if os.getpid() == parent:
            in_parent.append(lo)
        else:
            time.sleep(0.05)  # a slow writer process: the parent surely gets blocks to help with
        return real(fields, lo, hi)

    monkeypatch.setattr(csv_out, "rows_bytes", counted)
    job = csv_out.start_csv(tmp_path / "b.csv", cols, "statistics", stack=True, classic=False)
    if job.proc is None:
        pytest.skip("this platform does not fork")
    assert not (tmp_path / "b.csv").exists()  # only the partial file until wait()
    assert job.wait().read_bytes() == inline
    assert in_parent and max(in_parent) == 2816  # the parent wrote blocks from the end while the process ran


def test_csv_background_abort_and_failure_leave_nothing(tmp_path, monkeypatch):
    cols = result_table(n=600)
    monkeypatch.setattr(csv_out, "BACKGROUND_ROWS", 100)
    job = csv_out.start_csv(tmp_path / "c.csv", cols, "statistics", stack=False, classic=False)
    if job.proc is None:
        pytest.skip("this platform does not fork")
    job.abort()
    assert list(tmp_path.iterdir()) == []
    broken = dict(cols)
    del broken["t_max"]  # the child fails building the report
    job = csv_out.start_csv(tmp_path / "d.csv", broken, "statistics", stack=False, classic=False)
    with pytest.raises(OSError, match="d.csv: KeyError"):
        job.wait()
    assert list(tmp_path.iterdir()) == []

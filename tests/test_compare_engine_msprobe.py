"""run_compare end to end on msprobe-format dumps: docs/reference/msprobe-analysis.md §8.3, S-vectors through the engine, ranks, steps,
outputs (CSV, xlsx), errors."""

import csv
import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

from engines.compare import xlsx_out
from engines.compare.engine import run_compare
from engines.compare.options import CompareError

DATA = Path(__file__).parent / "data" / "msprobe" / "e2e_83"


def leaf(arr=None, stats=None, dtype="torch.float32", rg=False, data_name=None):
    if arr is not None:
        arr = np.asarray(arr, np.float32)
        stats = (float(arr.max()), float(arr.min()), float(arr.mean()), float(np.linalg.norm(arr)))
        crc = "{:08x}".format(zlib.crc32(arr.tobytes()))
    else:
        crc = None
    out = {"type": "torch.Tensor", "dtype": dtype, "shape": [4] if arr is None else list(arr.shape),
           "Max": stats[0], "Min": stats[1], "Mean": stats[2], "Norm": stats[3], "requires_grad": rg}
    if crc:
        out["md5"] = crc
    if data_name:
        out["data_name"] = data_name
    return out


def write_dump(root: Path, data: dict, *, rank=0, step=0, task="statistics", tensors=None):
    folder = root / "step{}".format(step) / "rank{}".format(rank)
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in (tensors or {}).items():
        (folder / "dump_tensor_data").mkdir(exist_ok=True)
        np.save(folder / "dump_tensor_data" / name, np.asarray(arr, np.float32))
    (folder / "dump.json").write_text(json.dumps({"task": task, "level": "L1", "framework": "pytorch",
                                                  "dump_data_dir": None, "data": data}))
    return root


def job(target, golden, out, **extra):
    section = {"target_path": str(target), "golden_path": str(golden), "output_path": str(out)}
    section.update(extra)
    return {"task": "compare", "compare": section}


class Events:
    def __init__(self):
        self.seen = []

    def emit(self, kind, **fields):
        self.seen.append((kind, fields))


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_reference_8_3_tensor_compare(tmp_path):
    ev = Events()
    out = run_compare(job(DATA / "npu", DATA / "bench", tmp_path / "out", highlight="classic",
                          formats=["csv", "xlsx"]), ev)
    assert out.summary["mode"] == "tensor"
    rows = read_csv(out.files["csv"])
    # dump order kept (classic msprobe sorts: matmul, relu, softmax)
    assert [r["NPU Name"] for r in rows] == [
        "Functional.relu.0.forward.input.0", "Functional.relu.0.forward.output.0",
        "Functional.matmul.0.forward.input.0", "Functional.matmul.0.forward.output.0",
        "Functional.softmax.0.forward.input.0", "Functional.softmax.0.forward.output.0"]
    mm, sm = rows[3], rows[5]
    assert [float(mm[k]) for k in ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                                   "Five Thousandths Err Ratio")] == [0.99596016239, 8, 8, 0.166666671634, 0.75, 0.75]
    assert [float(sm[k]) for k in ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr")] == \
        [0.666666666667, 0.44721360549596084, 0.30000000447, 3.0]
    assert mm["Accuracy Reached or Not"] == "No" and sm["Accuracy Reached or Not"] == "No"
    assert rows[0]["Accuracy Reached or Not"] == "Yes" and rows[0]["Result"] == "pass"
    # msprobe 26.2 says "pass" for matmul: we have an absolute-error verdict and a relative-error one
    assert mm["Result"] == "error" and "error: max_abs_err > 1" in mm["Err_message"]
    assert "The output's one thousandth err ratio decreases by more than 0.1" in mm["Err_message"]
    assert mm["Err_message"].count("one thousandth err ratio decreases") == 1  # msprobe lists it twice
    assert "exceeds 0.9, while the output's is below 0.6" in sm["Err_message"]
    assert mm["Data_name"] == "['Functional.matmul.0.forward.output.0.npy', " \
                              "'Functional.matmul.0.forward.output.0.npy']"
    r = out.results
    assert r["classic_colour"].tolist() == [0, 0, 0, 1, 0, 2]
    # first divergence: both ops got exact inputs; softmax adds the larger error
    assert [s["record"] for s in out.top_suspects] == ["Functional.softmax.0.forward", "Functional.matmul.0.forward"]
    assert ("step", {"step": 0, "total_steps": 1, "elapsed_s": pytest.approx(0, abs=60), "records": 6,
                     "unit": "pair"}) in \
        [(k, f) for k, f in ev.seen if k == "step"]
    from openpyxl import load_workbook

    ws = load_workbook(out.files["xlsx"]).active
    fills = [ws.cell(row=i, column=1).fill.start_color.rgb for i in range(2, 8)]
    assert fills[3] == "FFFFFF00" and fills[5] == "FFFF0000" and fills[0] != "FFFF0000"
    assert [c.value for c in ws[1]][:8] == ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype",
                                           "NPU Tensor Shape", "Bench Tensor Shape", "NPU Requires_grad",
                                           "Bench Requires_grad"]


def test_statistics_mode_on_a_tensor_dump_and_summary(tmp_path):
    out = run_compare(job(DATA / "npu", DATA / "bench", tmp_path / "out", mode="statistics",
                          formats=["csv"]), None)
    rows = read_csv(out.files["csv"])
    assert "Max diff" in rows[0] and "Cosine" not in rows[0]
    mm = rows[3]
    assert float(mm["Max diff"]) == -8.0 and float(mm["MaxRelativeErr"]) == pytest.approx(8 / 48)
    # statistics see the matmul change (|40-48| over max(48, rms 30.4) = 1/6 > 0.1: a warning) but not the
    # softmax permutation (same max/min/mean/norm): the reason tensor mode exists
    assert float(mm["RelErr"]) == pytest.approx(8 / 48) and mm["Result"] == "warning"
    assert rows[5]["Result"] == "pass"
    saved = json.loads(Path(out.files["summary"]).read_text())
    assert saved["mode"] == "statistics" and saved["rows"] == 6


def _stats_pair(tmp_path, t_data, g_data):
    return write_dump(tmp_path / "t", t_data), write_dump(tmp_path / "g", g_data)


def test_s_vectors_through_the_engine(tmp_path):
    x = leaf(stats=(1, -1, 0, 2))
    t = {
        "Functional.add.0.forward": {"input_args": [x], "input_kwargs": {"alpha": {"type": "int", "value": 2}},
                                     "output": [leaf(stats=(3, -2, 0.5, 4))]},
        "Functional.exp.0.forward": {"input_args": [x], "input_kwargs": {},
                                     "output": [leaf(stats=(float("inf"), 0, 1, 2))]},
        "Functional.mul.0.forward": {"input_args": [leaf(stats=(1, -1, 0, 2), rg=False)], "input_kwargs": {},
                                     "output": [leaf(stats=(1, -1, 0, 2))]},
        "Functional.npu_only.0.forward": {"input_args": [x], "input_kwargs": {}, "output": [x]},
        "Functional.s2.0.forward": {"input_args": [x], "input_kwargs": {},
                                    "output": [leaf(stats=(1, -3.2, 0, 2))]},
        "Functional.s3.0.forward": {"input_args": [x], "input_kwargs": {}, "output": [leaf(stats=(5, 0, 0, 0))]},
    }
    g = {
        "Functional.add.0.forward": {"input_args": [x], "input_kwargs": {"alpha": {"type": "int", "value": 3}},
                                     "output": [leaf(stats=(2, -2, 0.4, 3.5))]},
        "Functional.exp.0.forward": {"input_args": [x], "input_kwargs": {}, "output": [leaf(stats=(2, 0, 1, 2))]},
        "Functional.mul.0.forward": {"input_args": [leaf(stats=(1, -1, 0, 2), rg=True)], "input_kwargs": {},
                                     "output": [leaf(stats=(1, -1, 0, 2))]},
        "Functional.s2.0.forward": {"input_args": [x], "input_kwargs": {}, "output": [leaf(stats=(1, -2, 0, 2))]},
        "Functional.s3.0.forward": {"input_args": [x], "input_kwargs": {},
                                    "output": [leaf(stats=(2, 0, 0.001, 0))]},
    }
    tp, gp = _stats_pair(tmp_path, t, g)
    out = run_compare(job(tp, gp, tmp_path / "out", formats=["csv"]), None)
    rows = {r["NPU Name"]: r for r in read_csv(out.files["csv"])}
    # S1: max off by 1 over max(|2|, rms 3.5/2) = 0.5: past stats_rel_err's warning (0.1), not its error (> 0.5)
    s1 = rows["Functional.add.0.forward.output.0"]
    assert float(s1["RelErr"]) == 0.5 and s1["Result"] == "warning"
    # S2: min -3.2 vs -2.0, 1.2 over max(2, rms 1) = 0.6: an error (msprobe 26.2: pass; classic: Warning)
    s2 = rows["Functional.s2.0.forward.output.0"]
    assert float(s2["RelErr"]) == pytest.approx(0.6) and s2["Result"] == "error"
    # S3: max 5 vs 2 (1.5 of scale), mean 0 vs 0.001 against a zero tensor: an error
    assert rows["Functional.s3.0.forward.output.0"]["Result"] == "error"
    alpha = rows["Functional.add.0.forward.input.alpha"]
    assert alpha["NPU Dtype"] == "<class 'int'>" and float(alpha["Max diff"]) == -1.0
    assert alpha["Result"] == "error" and "scalar argument changed" in alpha["Err_message"]
    exp_out = rows["Functional.exp.0.forward.output.0"]
    assert exp_out["Result"] == "error" and "target non-finite" in exp_out["Err_message"]
    assert exp_out["Max diff"] == " inf"
    rg = rows["Functional.mul.0.forward.input.0"]
    assert rg["Requires_grad Consistent"] == "False" and rg["Result"] == "warning"
    only = rows["Functional.npu_only.0.forward.output.0"]
    assert only["Result"] == "unmatched" and only["Bench Name"] == "N/A"
    assert only["Err_message"] == "No bench data matched."
    add = [s for s in out.top_suspects if s["record"] == "Functional.add.0.forward"][0]
    assert add["changed_args"] == "input.alpha: 2 -> 3"
    # the op that first produces inf ranks first (its inputs are finite)
    assert out.top_suspects[0]["record"] == "Functional.exp.0.forward"


def test_all_zero_side_is_an_error_not_a_pass(tmp_path):
    t = write_dump(tmp_path / "t", {"Functional.relu.0.forward": {
        "input_args": [], "input_kwargs": {}, "output": [leaf(np.zeros(3), data_name="r.npy")]}},
        task="tensor", tensors={"r.npy": np.zeros(3)})
    g = write_dump(tmp_path / "g", {"Functional.relu.0.forward": {
        "input_args": [], "input_kwargs": {}, "output": [leaf(np.array([1.0, 0, 0]), data_name="r.npy")]}},
        task="tensor", tensors={"r.npy": np.array([1.0, 0, 0])})
    out = run_compare(job(t, g, tmp_path / "out", formats=["csv"]), None)
    row = read_csv(out.files["csv"])[0]
    assert row["Cosine"] == "Nan" and row["Result"] == "error" and "one side all zeros" in row["Err_message"]
    assert "All the data is Zero in npu dump data" in row["Err_message"]


def test_ranks_pair_by_id_and_steps_by_number(tmp_path):
    d = {"Functional.relu.0.forward": {"input_args": [leaf(stats=(1, 0, 0.5, 1))], "input_kwargs": {},
                                       "output": []}}
    for rank in (0, 2):
        write_dump(tmp_path / "t", d, rank=rank, step=0)
        write_dump(tmp_path / "t", d, rank=rank, step=1)
    for rank in (2, 5):
        write_dump(tmp_path / "g", d, rank=rank, step=1)
        write_dump(tmp_path / "g", d, rank=rank, step=3)
    out = run_compare(job(tmp_path / "t", tmp_path / "g", tmp_path / "out", formats=["csv"]), None)
    assert out.summary["pieces"] == [{"rank": 2, "target_step": 1, "golden_step": 1}]
    notes = " | ".join(out.summary["notes"])
    assert "rank 0 only in the target" in notes and "rank 5 only in the golden" in notes
    assert "rank 2 step 3: only in the golden" in notes
    rows = read_csv(out.files["csv"])
    assert [(r["Rank"], r["Step"]) for r in rows] == [("2", "1")]


def test_rank_and_step_filters(tmp_path):
    d = {"Functional.relu.0.forward": {"input_args": [leaf(stats=(1, 0, 0.5, 1))], "input_kwargs": {},
                                       "output": []}}
    for side in ("t", "g"):
        for rank in (0, 1):
            for step in (0, 1, 2):
                write_dump(tmp_path / side, d, rank=rank, step=step)
    out = run_compare(job(tmp_path / "t", tmp_path / "g", tmp_path / "out", formats=["csv"], rank=[1],
                          step=[0, 2]), None)
    assert out.summary["pieces"] == [{"rank": 1, "target_step": 0, "golden_step": 0},
                                     {"rank": 1, "target_step": 2, "golden_step": 2}]


def test_single_steps_pair_whatever_their_numbers(tmp_path):
    d = {"Functional.relu.0.forward": {"input_args": [leaf(stats=(1, 0, 0.5, 1))], "input_kwargs": {},
                                       "output": []}}
    write_dump(tmp_path / "t", d, step=4)
    write_dump(tmp_path / "g", d, step=0)
    out = run_compare(job(tmp_path / "t" / "step4", tmp_path / "g", tmp_path / "out", formats=["csv"]), None)
    assert out.summary["pieces"] == [{"rank": 0, "target_step": 4, "golden_step": 0}]
    assert out.summary["verdicts"]["pass"] == 1


def test_findings_give_exit_code_3_unless_turned_off(tmp_path):
    j = job(DATA / "npu", DATA / "bench", tmp_path / "a", formats=["csv"])
    assert run_compare(j, None).exit_code == 3
    assert run_compare(j, None, fail_on_findings=False, write=False).exit_code == 0
    same = job(DATA / "npu", DATA / "npu", tmp_path / "b", formats=["csv"])
    assert run_compare(same, None).exit_code == 0


def test_bad_input_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(CompareError, match=r"compare.target_path: .*nowhere: no such file or folder") as err:
        run_compare(job(tmp_path / "nowhere", DATA / "bench", tmp_path / "out"), None)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
    stats = tmp_path / "stats"
    write_dump(stats, {"Functional.relu.0.forward": {"input_args": [leaf(stats=(1, 0, 0.5, 1))],
                                                     "input_kwargs": {}, "output": []}})
    with pytest.raises(CompareError, match="compare.mode: tensor needs full tensors"):
        run_compare(job(stats, DATA / "bench", tmp_path / "out", mode="tensor"), None)
    with pytest.raises(CompareError, match="compare.mode"):
        run_compare(job(stats, stats, tmp_path / "out", mode="fast"), None)
    with pytest.raises(CompareError, match="compare.data_mapping .*missing.yaml: cannot read"):
        run_compare(job(stats, stats, tmp_path / "out", data_mapping=str(tmp_path / "missing.yaml")), None)


def test_xlsx_is_refused_above_excels_row_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(xlsx_out, "EXCEL_MAX_ROWS", 4)
    out = run_compare(job(DATA / "npu", DATA / "bench", tmp_path / "out", formats=["csv", "xlsx"]), None)
    assert "xlsx" not in out.files and "csv" in out.files
    assert any("exceed Excel's limit" in n for n in out.summary["notes"])


def test_results_go_to_a_new_run_folder_and_are_never_overwritten(tmp_path):
    j = {"task": "compare", "dump_path": str(tmp_path / "runs"),
         "compare": {"target_path": str(DATA / "npu"), "golden_path": str(DATA / "bench"), "formats": ["csv"]}}
    a = run_compare(j, None).output_dir
    b = run_compare(j, None).output_dir
    assert a != b and a.parent == b.parent == tmp_path / "runs"
    assert (tmp_path / "runs" / "latest").resolve() == b.resolve()
    meta = json.loads((b / "run.json").read_text())
    assert meta["task"] == "compare" and meta["status"] == "finished" and meta["exit_code"] == 3
    assert meta["summary"]["top_suspects"][0] == "Functional.softmax.0.forward"
    fixed = job(DATA / "npu", DATA / "bench", tmp_path / "fixed", formats=["csv"])
    run_compare(fixed, None)
    with pytest.raises(CompareError, match="already holds compare results"):
        run_compare(fixed, None)


def test_md5_mode(tmp_path):
    root = tmp_path / "g"
    shutil.copytree(DATA / "bench", root)
    out = run_compare(job(DATA / "npu", root, tmp_path / "out", mode="md5", formats=["csv"]), None)
    rows = read_csv(out.files["csv"])
    assert list(rows[0])[8:10] == ["NPU MD5", "BENCH MD5"]
    assert [r["Result"] for r in rows] == ["pass", "pass", "pass", "error", "pass", "error"]

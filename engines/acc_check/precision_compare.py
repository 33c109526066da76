"""``probe-tui api-precision-compare NPU GPU -o DIR``: msprobe's api_precision_compare, the three-way verdict.

Two acc_check results of the same dump, each judged against the same CPU reference: the device under test (NPU)
and a trusted second device (GPU). Each output of the device under test is judged by its standard against the
second device's metrics (docs/ACC_CHECK.md, "Two devices: api-precision-compare"; docs/reference/msprobe-analysis.md
section 2.7). The inputs are the ``accuracy_checking_details_*.csv`` files (ours or msprobe's, same columns);
the outputs are msprobe's ``api_precision_compare_result_<ts>.csv`` and ``api_precision_compare_details_<ts>.csv``.
"""

import csv
import math
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from engines import safe_fs
from engines.acc_check import rules
from engines.acc_check import standards as st
from engines.acc_check.results import DETAILS_COLUMNS, DETAILS_PREFIX, RESULT_COLUMNS, RESULT_PREFIX
from engines.errors import JobError

COMPARE_RESULT_PREFIX = "api_precision_compare_result_"
COMPARE_DETAILS_PREFIX = "api_precision_compare_details_"
COMPARE_DETAILS_COLUMNS = (
    "API Name", "小值域错误比值", "小值域判定结果", "均方根误差比值", "均方根误差判定结果", "相对误差最大值比值",
    "相对误差最大值判定结果", "相对误差平均值比值", "相对误差平均值判定结果", "误差均衡性比值", "误差均衡性判定结果",
    "inf/nan错误率", "inf/nan判定结果", "相对误差错误率", "相对误差判定结果", "绝对误差错误率", "绝对误差判定结果",
    "二进制一致错误率", "二进制一致错误率判定结果", "ULP误差平均值", "ULP误差大于阈值占比", "ULP误差大于阈值占比比值",
    "ULP误差判定结果", "双千指标", "双千指标判定结果", "比对结果", "比对算法", "Message")
ALGORITHMS = {rules.BENCHMARK: "标杆比对法", rules.ABSOLUTE: "绝对阈值法", rules.BINARY: "二进制一致法",
              rules.ULP: "ULP误差比对法", rules.THOUSANDTH: "双千指标法"}
UNSUPPORTED = "This data type does not support benchmark compare."

# The benchmark standard: (metric, its ratio's column, its status column); the thresholds by API tier (msprobe's
# L0 default, L1 and L2 lists). The error balance is reported, not judged.
_BENCH = (("small_value_err_ratio", "小值域错误比值", "小值域判定结果"),
          ("rmse", "均方根误差比值", "均方根误差判定结果"),
          ("max_rel_err", "相对误差最大值比值", "相对误差最大值判定结果"),
          ("mean_rel_err", "相对误差平均值比值", "相对误差平均值判定结果"),
          ("eb", "误差均衡性比值", "误差均衡性判定结果"))
_TIER_L1 = frozenset(("embedding", "npu_fusion_attention", "npu_fusion_attention_grad", "scatter_", "scatter_add_"))
_TIER_L2 = frozenset(("addmm", "npu_cross_entropy_loss", "npu_cross_entropy_loss_backward", "gelu", "GELU",
                      "layer_norm", "matmul", "mm", "index", "one_hot", "sum", "npu_rms_norm",
                      "npu_rms_norm_backward", "nonzero"))
_DETAIL_COLS = {c: i for i, c in enumerate(DETAILS_COLUMNS)}
_METRIC_COLS = dict(zip(rules.COLUMNS, DETAILS_COLUMNS[4:4 + len(rules.COLUMNS)]))


def bench_thresholds(api: str) -> Dict[str, float]:
    """The ratio each benchmark metric may reach before it is an error, for API ``api`` (its short name)."""
    if api in _TIER_L1:
        top, mean = 5.0, 1.5
    elif api in _TIER_L2:
        top, mean = 2.0, 1.2
    else:
        top, mean = 10.0, 2.0
    return {"small_value_err_ratio": 2.0, "rmse": mean, "max_rel_err": top, "mean_rel_err": mean, "eb": 2.0}


def details_csv(path: Path, side: str) -> Path:
    """The details CSV of a result: the file itself, or the newest ``accuracy_checking_details_*.csv`` of a
    folder."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    found = sorted(path.glob(DETAILS_PREFIX + "*.csv")) if path.is_dir() else []
    if not found:
        raise JobError("%s: %s has no %s*.csv (give an acc_check result folder or its details CSV)" % (
            side, path, DETAILS_PREFIX))
    return found[-1]


def _number(text: str) -> float:
    text = text.strip()
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def read_details(path: Path, side: str) -> Tuple[Dict[str, Dict[str, Any]], List[str]]:
    """(output name -> its row, output names in file order) of a details CSV; a name twice is bad input."""
    rows: Dict[str, Dict[str, Any]] = {}
    order: List[str] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            head = next(reader, [])
            if tuple(h.strip() for h in head[:len(DETAILS_COLUMNS)]) != DETAILS_COLUMNS:
                raise JobError("%s: %s is not an accuracy_checking_details CSV (its header differs)" % (side, path))
            for line in reader:
                if not line or not line[0].strip():
                    continue
                line = line + [""] * (len(DETAILS_COLUMNS) - len(line))
                name = line[0].strip()
                if name in rows:
                    raise JobError("%s: %s names %s twice" % (side, path, name))
                rows[name] = {"device_dtype": line[_DETAIL_COLS["DEVICE Dtype"]].strip(),
                              "shape": line[_DETAIL_COLS["Shape"]].strip(),
                              "metrics": {k: _number(line[_DETAIL_COLS[c]]) for k, c in _METRIC_COLS.items()},
                              "status": line[_DETAIL_COLS["Status"]].strip(),
                              "message": line[_DETAIL_COLS["Message"]].strip()}
                order.append(name)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise JobError("%s: cannot read %s (%s)" % (side, path, exc)) from None
    return rows, order


def _skip_messages(details: Path) -> Dict[str, str]:
    """API name -> the SKIP message of its result row (the result CSV beside the details CSV, when there is one)."""
    result = details.with_name(details.name.replace(DETAILS_PREFIX, RESULT_PREFIX, 1))
    out: Dict[str, str] = {}
    if result == details or not result.is_file():
        return out
    try:
        with open(result, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            if tuple(h.strip() for h in next(reader, [])[:4]) != RESULT_COLUMNS:
                return out
            for line in reader:
                if len(line) >= 4 and "SKIP" in (line[1].strip(), line[2].strip()):
                    out[line[0].strip()] = line[3].strip()
    except (OSError, UnicodeDecodeError, csv.Error):
        return {}
    return out


def split_name(output: str) -> Tuple[str, str, str]:
    """(API name, direction, short API name) of ``Functional.softmax.0.forward.output.0``."""
    for direction in ("forward", "backward"):
        mark = "." + direction + "."
        if mark in output:
            api = output.split(mark, 1)[0]
            parts = api.split(".")
            return api, direction, parts[1] if len(parts) > 2 else parts[0]
    return output, "forward", output


def _both_nonfinite(x: float, y: float) -> Optional[bool]:
    """None when both are finite; else whether the two agree (both NaN, or infinities of the same sign)."""
    if math.isfinite(x) and math.isfinite(y):
        return None
    if math.isnan(x) and math.isnan(y):
        return True
    return math.isinf(x) and math.isinf(y) and (x > 0) == (y > 0)


def _cell(value: float) -> str:
    return " " if math.isnan(value) else "%.14f" % value if abs(value) < 1e15 else repr(value)


def judge_output(name: str, npu: Dict[str, Any], gpu: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """One output of the device under test against the second device's: its details row (the columns of
    ``COMPARE_DETAILS_COLUMNS``), with ``status``, ``standard`` and ``message``."""
    api, direction, short = split_name(name)
    row: Dict[str, Any] = {c: " " for c in COMPARE_DETAILS_COLUMNS}
    row.update({"API Name": name, "api": api, "direction": direction})

    def done(status: str, standard: str, message: str) -> Dict[str, Any]:
        row.update({"比对结果": status, "比对算法": ALGORITHMS.get(standard, " ") if standard else " ",
                    "Message": message or " ", "status": status, "standard": standard, "message": message})
        return row

    dtype = st.short_dtype(npu["device_dtype"]) if npu["device_dtype"] else ""
    if npu["status"] == st.SKIP:
        return done(st.SKIP, "", npu["message"] or "skipped by the check of the device under test")
    if dtype not in st.STANDARD_DTYPES or npu["shape"] in ("[0]", "(0,)"):
        return done(st.SKIP, "", UNSUPPORTED)
    if gpu is None:
        return done(st.SKIP, "", "not in the second device's result")
    if gpu["status"] == st.SKIP:
        return done(st.SKIP, "", "skipped by the second device's check: " + (gpu["message"] or "no reason given"))
    standard = rules.api_class(short, dtype)
    if direction == "backward":
        standard = rules.BENCHMARK  # gradients: benchmark whatever the class, as acc_check judges them
    n, g = npu["metrics"], gpu["metrics"]
    if standard == rules.BENCHMARK:
        limits = bench_thresholds(short)
        statuses, bad = [], []
        for key, ratio_col, status_col in _BENCH:
            agree = _both_nonfinite(n[key], g[key])
            if agree is None:
                ratio = st.precision_ratio(n[key], g[key], dtype)
                status = st.ERROR if ratio > limits[key] else st.PASS
                row[ratio_col] = _cell(ratio)
                if status == st.ERROR and key != "eb":
                    bad.append("%s ratio %.4g > %g" % (key, ratio, limits[key]))
            else:
                status = st.PASS if agree else st.ERROR
                if not agree and key != "eb":
                    bad.append("%sinf或nan不一致" % ratio_col.replace("比值", ""))
            row[status_col] = status
            if key != "eb":
                statuses.append(status)
        return done(st.worst(statuses), standard, "; ".join(bad))
    if standard == rules.ABSOLUTE:
        trio = (("inf_nan_error_ratio", "inf/nan错误率", "inf/nan判定结果"),
                ("rel_err_ratio", "相对误差错误率", "相对误差判定结果"),
                ("abs_err_ratio", "绝对误差错误率", "绝对误差判定结果"))
        bad = []
        for key, value_col, status_col in trio:
            ok = n[key] == 0
            row[value_col], row[status_col] = _cell(n[key]), st.PASS if ok else st.ERROR
            if not ok:
                bad.append("%s %.4g != 0" % (key, n[key]))
        return done(st.ERROR if bad else st.PASS, standard, "; ".join(bad))
    if standard == rules.BINARY:
        ok = n["binary_error_rate"] == 0
        row["二进制一致错误率"], row["二进制一致错误率判定结果"] = _cell(n["binary_error_rate"]), st.PASS if ok else st.ERROR
        return done(st.PASS if ok else st.ERROR, standard,
                    "" if ok else "binary_error_rate %.4g != 0" % n["binary_error_rate"])
    if standard == rules.ULP:
        mean, prop, gprop = n["mean_ulp_err"], n["ulp_err_proportion"], g["ulp_err_proportion"]
        ratio = st.precision_ratio(prop, gprop, dtype) if math.isfinite(prop) and math.isfinite(gprop) else math.nan
        if dtype == "float32":
            ok = mean < 64 or prop < 0.05 or ratio < 1
            why = "mean %.4g ulp >= 64, %.4g%% above 32 ulp >= 5%%, %.4g x the second device's proportion" % (
                mean, 100 * prop, ratio)
        else:
            ok = prop < 0.001 or ratio < 1
            why = "%.4g%% above 1 ulp >= 0.1%%, %.4g x the second device's proportion" % (100 * prop, ratio)
        row.update({"ULP误差平均值": _cell(mean), "ULP误差大于阈值占比": _cell(prop),
                    "ULP误差大于阈值占比比值": _cell(ratio), "ULP误差判定结果": st.PASS if ok else st.ERROR})
        return done(st.PASS if ok else st.ERROR, standard, "" if ok else "ULP: " + why)
    ok = n["thousandth"] >= 0.999
    row["双千指标"], row["双千指标判定结果"] = _cell(n["thousandth"]), st.PASS if ok else st.ERROR
    return done(st.PASS if ok else st.ERROR, standard, "" if ok else "thousandth %.6g < 0.999" % n["thousandth"])


def compare(npu_path: Path, gpu_path: Path) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(API rows, output rows) of the three-way verdict."""
    npu_csv, gpu_csv = details_csv(npu_path, "NPU result"), details_csv(gpu_path, "GPU result")
    npu, order = read_details(npu_csv, "NPU result")
    gpu, _ = read_details(gpu_csv, "GPU result")
    outputs = [judge_output(name, npu[name], gpu.get(name)) for name in order]
    apis: Dict[str, Dict[str, Any]] = {}
    for out in outputs:
        api = apis.setdefault(out["api"], {"name": out["api"], "forward": [], "backward": [], "messages": []})
        api[out["direction"]].append(out["status"])
        if out["status"] != st.PASS and out["message"]:
            api["messages"].append("%s: %s" % (out["API Name"][len(out["api"]) + 1:], out["message"]))
    for name, message in _skip_messages(npu_csv).items():
        if name not in apis:
            apis[name] = {"name": name, "forward": [st.SKIP], "backward": [], "messages": [message]}
    rows = []
    for api in apis.values():
        forward, backward = st.worst(api["forward"]), st.worst(api["backward"])
        rows.append({"name": api["name"], "forward": forward, "backward": backward,
                     "status": st.worst([s for s in (forward, backward) if s != " "]),
                     "message": "; ".join(api["messages"])})
    return rows, outputs


def api_precision_compare(npu_path: str, gpu_path: str, out_dir: str) -> Dict[str, Any]:
    """Write the two CSVs into ``out_dir``; the summary (counts, failing APIs, the files)."""
    apis, outputs = compare(Path(npu_path), Path(gpu_path))
    out = Path(out_dir).expanduser()
    try:
        safe_fs.make_dirs(out)
    except OSError as exc:
        raise JobError("-o: %s" % safe_fs.describe_os_error(out, exc)) from None
    stamp = time.strftime("%Y%m%d%H%M%S")
    result_csv = out / (COMPARE_RESULT_PREFIX + stamp + ".csv")
    details = out / (COMPARE_DETAILS_PREFIX + stamp + ".csv")
    with safe_fs.atomic_file(details, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(COMPARE_DETAILS_COLUMNS)
        for row in outputs:
            w.writerow([row[c] for c in COMPARE_DETAILS_COLUMNS])
    with safe_fs.atomic_file(result_csv, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(("API Name",) + RESULT_COLUMNS[1:])
        for api in apis:
            w.writerow([api["name"], api["forward"], api["backward"], api["message"]])
    counts = {s: sum(1 for a in apis if a["status"] == s) for s in (st.PASS, st.WARNING, st.ERROR, st.SKIP)}
    return {"apis": len(apis), "counts": counts, "result_csv": str(result_csv), "details_csv": str(details),
            "failing": [{"name": a["name"], "status": a["status"], "message": a["message"]} for a in apis
                        if a["status"] in (st.ERROR, st.WARNING)]}

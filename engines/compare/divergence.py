"""First divergence: rank operators by the error they add, and roll results up the module tree.

Error an operator adds (docs/reference/diagnosis-notes.md item 3): ``score = out_err / max(in_err, floor)`` where ``out_err`` is the
largest norm-wise relative error ‖t−g‖/‖g‖ (float64) among its floating outputs and ``in_err`` the largest among its
floating inputs and parameters (for a backward record, also among the inputs and outputs of its forward call,
which the gradient depends on). An op that only inherits an error scores about 1; the op that introduces one
scores far above, even when everything after it differs too (msprobe's stated limitation, docs/reference/msprobe-analysis.md §6.1).

``floor`` is the larger of 2^-20 (about where float32 kernels of two devices differ) and the unit roundoff of the least precise floating dtype among the op's outputs on either side (2^-8
for bfloat16, 2^-11 for float16): an op that computes in bfloat16 adds a few 2^-8 of error by design, so against
a float32 reference it only ranks high when it adds clearly more than its precision explains.

In statistics mode ``rel_err`` is a lower bound computed from max/min/mean/norm; the ranking still works in most
cases, less often than with tensors. Where the bound misleads (masked tensors, statistics that hide an error) and
for ops whose maths amplifies their input error by a known factor, ``in_err`` and the score are corrected as
engines/compare/input_errors.py describes: ``score = out_err / max(gain · in_err, floor)``.

Non-finite values: an output with NaN/inf where the golden is finite has infinite error; if an input is already
non-finite it is inherited (score 1), so the op that *first* produces NaN/inf ranks first. Matching non-finite
values (``-inf`` mask fills) compare as equal and never count.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from engines.compare import dataflow, input_errors
from engines.compare.dtypes import dtype_class
from engines.compare.verdicts import ERROR, PASS, SKIPPED, UNMATCHED, WARNING, F
from engines.dumps.rows import (
    DIR_BACKWARD,
    DIR_FORWARD,
    IO_INPUT,
    IO_OUTPUT,
    IO_PARAM,
    KIND_API,
    KIND_MODULE,
    factorize,
    group_reduce,
)

DEFAULT_FLOOR = 2.0 ** -20
KERNEL = "Kernel."  # graph-mode kernel records (engines/compare/kernel_map.py)
UPSTREAM_NOTE = "input error estimated from the outputs before it (no comparable input in the kernel dump)"
UNIT_ROUNDOFF = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "half": 2.0 ** -11, "float8": 2.0 ** -4}
# severity for "worst": error > warning > unmatched > pass = skipped
SEVERITY = np.array([1, 3, 4, 2, 0], dtype=np.int8)  # indexed by verdict code
FROM_SEVERITY = np.array([SKIPPED, PASS, UNMATCHED, WARNING, ERROR], dtype=np.uint8)


def dtype_floor(dtype: str) -> float:
    """Unit roundoff of a low-precision float dtype (0 for float32 and wider, and for non-floats)."""
    base = str(dtype).lower().rsplit(".", 1)[-1]
    for key, u in UNIT_ROUNDOFF.items():
        if base.startswith(key):
            return u
    return 0.0


def _per_value(values: np.ndarray, fn, dtype) -> np.ndarray:
    """``fn`` applied once per distinct value of an object column."""
    codes, uniques = factorize(values)
    table = np.array([fn(u) for u in uniques.tolist()], dtype=dtype) if len(uniques) else np.zeros(0, dtype)
    return table[codes] if len(uniques) else np.zeros(values.shape[0], dtype)


@dataclass
class RecordFrame:
    """Per-record aggregates of one piece's result rows (records in first-seen order)."""

    codes: np.ndarray  # record code of each row
    records: np.ndarray
    first_row: np.ndarray
    kind: np.ndarray
    direction: np.ndarray
    out_err: np.ndarray  # NaN: no comparable floating output
    in_err: np.ndarray  # NaN: no comparable floating input
    floor_dtype: np.ndarray
    worst: np.ndarray  # verdict code
    row_float: np.ndarray  # per row: a floating-point tensor


def record_frame(cols: Dict[str, np.ndarray]) -> RecordFrame:
    n = int(cols["record"].shape[0])
    if "record_code" in cols:  # compare_piece's record numbers (dump order)
        codes = cols["record_code"]
        k = int(codes.max()) + 1 if n else 0
        first_row = group_reduce(np.minimum, codes, np.arange(n, dtype=np.int64), k, n)
        records = cols["record"][first_row]
    else:
        codes, records = factorize(cols["record"])
        k = len(records)
        first_row = group_reduce(np.minimum, codes, np.arange(n, dtype=np.int64), k, n)
    is_float = _per_value(cols["target_dtype"], lambda d: dtype_class(str(d)) == "float", bool)
    # a statistics bound that is unknown (a masked tensor) counts as no error measured, not as 0
    rel = np.where(input_errors.unknown_rows(cols, input_errors.measured_rows(cols)), np.nan, cols["rel_err"])
    usable = cols["matched"] & is_float & ~np.isnan(rel)
    io = cols["io"]
    out_rows = usable & (io == IO_OUTPUT)
    in_rows = usable & ((io == IO_INPUT) | (io == IO_PARAM)) & ~dataflow.out_slot_rows(cols)
    out_err = group_reduce(np.fmax, codes[out_rows], rel[out_rows], k, np.nan)
    in_err = group_reduce(np.fmax, codes[in_rows], rel[in_rows], k, np.nan)
    outputs = io == IO_OUTPUT
    row_floor = np.maximum(_per_value(cols["target_dtype"], dtype_floor, np.float64),
                           _per_value(cols["golden_dtype"], dtype_floor, np.float64))
    floor_dtype = group_reduce(np.maximum, codes[outputs], row_floor[outputs], k, 0.0)
    sev = SEVERITY[cols["verdict"]]
    worst = FROM_SEVERITY[group_reduce(np.maximum, codes, sev, k, np.int8(0))]
    return RecordFrame(codes, records, first_row, cols["kind"][first_row], cols["direction"][first_row],
                       out_err, in_err, floor_dtype, worst, is_float)


def _forward_twin(name: str) -> str:
    """The forward record a backward record differentiates (same call index)."""
    tokens = name.split(".")
    if tokens[-1] == "backward":
        tokens[-1] = "forward"
    elif len(tokens) > 1 and tokens[-2] == "backward":
        tokens[-2] = "forward"
    return ".".join(tokens)


def _changed_args(cols, rows) -> str:
    parts = []
    for i in rows:
        parts.append("{}: {} -> {}".format(cols["slot"][i], _scalar_text(cols, i, "t"), _scalar_text(cols, i, "g")))
    return "; ".join(parts)


def _scalar_text(cols, i: int, side: str) -> str:
    text = cols.get(side + "_text")
    if text is not None and text[i] is not None:
        return str(text[i])
    v = cols[side + "_max"][i]
    return "{:g}".format(v) if not math.isnan(v) else "None"


KIND_REGION, KIND_GAP = 4, 5
SUSPECT_KINDS = ("api", "module", "parameters_grad", "save", "target-only ops", "gap")
PHASE_FORWARD, PHASE_BACKWARD, PHASE_UPDATE = 0, 1, 2
PHASES = ("forward", "backward", "update")
GAP_MIN = 4.0  # an input this many times further off than the output that fed it is a gap
MEMBERS_LISTED = 4  # a target-only region of at most this many ops is named op by op
MODEL_SIGNAL = 4.0  # a forward/backward score this high puts the update phase after the model


def _phases(fr: RecordFrame, order: np.ndarray) -> np.ndarray:
    """forward / backward / update: forward calls after the step's last backward record run in the optimizer
    step (or clipping), where Adam's normalisation turns sign flips of tiny gradients into large errors."""
    phase = np.where(fr.direction == DIR_BACKWARD, PHASE_BACKWARD, PHASE_FORWARD).astype(np.uint8)
    back = fr.direction == DIR_BACKWARD
    if back.any():
        last_back = order[back].max()
        phase[(fr.direction == DIR_FORWARD) & (order > last_back)] = PHASE_UPDATE
    return phase


def rank_records(cols: Dict[str, np.ndarray], *, small_value: float = DEFAULT_FLOOR,
                 frame: Optional[RecordFrame] = None) -> Dict[str, np.ndarray]:
    """The first-divergence table of one piece, best suspect first."""
    fr = frame or record_frame(cols)
    rec_order = cols["order"][fr.first_row] if len(fr.first_row) else np.zeros(0, np.int64)
    phase = _phases(fr, rec_order)
    candidates = (fr.kind == KIND_API) | (fr.kind == KIND_MODULE)
    with np.errstate(invalid="ignore"):
        candidates &= fr.out_err > 0
    api_only = bool((candidates & (fr.kind == KIND_API)).any())
    if api_only:
        candidates &= fr.kind == KIND_API
    prod = dataflow.producers(cols, api_only)
    ie = input_errors.input_errors(cols, fr.codes, len(fr.records), fr.row_float, prod)
    in_err = ie.in_err.copy()
    backward = np.flatnonzero(fr.direction == DIR_BACKWARD)
    index = {r: i for i, r in enumerate(fr.records.tolist())} if backward.size else {}
    for b in backward.tolist():
        twin = index.get(_forward_twin(fr.records[b]))
        if twin is not None and fr.direction[twin] == DIR_FORWARD:
            in_err[b] = np.fmax(in_err[b], np.fmax(ie.in_err[twin], fr.out_err[twin]))
    idx = np.flatnonzero(candidates)
    # a graph-mode kernel with no comparable input (MindSpore's kernel dump leaves views' inputs out; a kernel's
    # extra inputs have no API counterpart): its input error is that of the forward outputs before it, not 0
    blind = np.isnan(fr.in_err) & np.fromiter((str(r).startswith(KERNEL) for r in fr.records.tolist()), bool,
                                               len(fr.records))
    if blind.any():
        in_err[blind] = upstream_errors(cols, ie.rel)[fr.first_row[blind]]
    out_e = fr.out_err[idx]
    in_e = np.nan_to_num(in_err[idx], nan=0.0, posinf=np.inf, neginf=0.0)
    floor = np.maximum(small_value, fr.floor_dtype[idx])
    with np.errstate(invalid="ignore"):
        amplified = idx[(in_e > 0) & (out_e > np.maximum(in_e, floor))]  # only these could owe it to a gain
    ie.gain = input_errors.gains(cols, fr.codes, len(fr.records), fr.row_float, amplified)
    gain = ie.gain[idx]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        expected = np.where(in_e > 0, gain * in_e, 0.0)  # the error its inputs explain
        score = out_e / np.maximum(expected, floor)
    inf_out = np.isinf(out_e)
    score[inf_out] = np.where(np.isinf(in_e[inf_out]), 1.0, np.inf)
    blank = np.empty(idx.shape[0], dtype=object)
    blank.fill("")
    entries = {"code": idx, "kind": fr.kind[idx].astype(np.uint8), "score": score, "out_err": out_e,
               "in_err": in_e, "floor": floor, "note": _input_notes(ie, idx, in_e, gain, floor),
               "last_op": blank, "link": blank, "n_ops": np.ones(idx.shape[0], dtype=np.int64), "members": blank,
               "unknown": ie.unknown[idx]}
    for p in np.flatnonzero(blind[idx]).tolist():
        entries["note"][p] = entries["note"][p] or UPSTREAM_NOTE
    extra = _dataflow_entries(cols, fr, small_value, prod, ie, upstream_errors(cols, ie.rel))
    if extra:
        extra["unknown"] = np.zeros(extra["code"].shape[0], dtype=bool)
        entries = {k: np.concatenate([entries[k], extra[k]]) for k in entries}
    codes = entries["code"]
    first = fr.first_row[codes]
    order = cols["order"][first]
    ph = phase[codes]
    model = ph != PHASE_UPDATE
    signal = bool(model.any() and np.nanmax(np.where(model, entries["score"], 0.0)) >= MODEL_SIGNAL)
    # the update phase after the model when the model shows a signal, or when the op's inputs (the gradients)
    # already differ: Adam's normalisation amplifies what it is fed; an update op fed exact inputs ranks on its score
    with np.errstate(invalid="ignore"):
        fed = entries["in_err"] > entries["floor"]
    late = ((~model) & (signal | fed)) | entries.pop("unknown")
    sort = np.lexsort((order, -entries["score"], late))
    entries = {k: v[sort] for k, v in entries.items()}
    codes, first, order, ph = codes[sort], first[sort], order[sort], ph[sort]
    changed = np.full(codes.shape[0], "", dtype=object)
    flagged = np.flatnonzero((cols["flags"] & F["scalar argument changed"]) != 0)
    if flagged.size:
        by_code: Dict[int, List[int]] = {}
        for i in flagged.tolist():
            by_code.setdefault(int(fr.codes[i]), []).append(i)
        for p, c in enumerate(codes.tolist()):
            if c in by_code and entries["kind"][p] < KIND_REGION:
                changed[p] = _changed_args(cols, by_code[c])
    return {
        "rank": cols["rank"][first].astype(np.int64), "step": cols["step"][first].astype(np.int64),
        "position": np.arange(1, codes.shape[0] + 1, dtype=np.int64), "record": fr.records[codes],
        "kind": entries["kind"], "direction": fr.direction[codes].astype(np.uint8), "phase": ph,
        "tier": late[sort].astype(np.uint8),
        "score": entries["score"].astype(np.float64), "out_err": entries["out_err"], "in_err": entries["in_err"],
        "floor": entries["floor"], "worst_verdict": fr.worst[codes], "first_row": first.astype(np.int64),
        "order": order.astype(np.int64), "parent": cols["parent"][first], "changed_args": changed,
        "note": entries["note"], "last_op": entries["last_op"], "n_ops": entries["n_ops"], "link": entries["link"],
        "members": entries["members"],
    }


def _input_notes(ie: input_errors.InputErrors, idx: np.ndarray, in_e: np.ndarray, gain: np.ndarray,
                 floor: np.ndarray) -> np.ndarray:
    """Why an op's input error is what the score used: unknown, carried from upstream, or amplified (the last
    two only where they moved the score: the input error is above the floor)."""
    notes = np.empty(idx.shape[0], dtype=object)
    notes.fill("")
    for p in np.flatnonzero(ie.unknown[idx] | ((ie.carried[idx] | (gain > 1)) & (in_e > floor))).tolist():
        c = int(idx[p])
        if ie.unknown[c]:
            notes[p] = "input error unknown (statistics of a masked input)"
        elif gain[p] > 1 and in_e[p] > floor[p]:
            notes[p] = "its maths amplifies input error {:.3g}x".format(float(gain[p]))
        else:
            notes[p] = "input error carried from upstream (statistics hide it)"
    return notes


def upstream_errors(cols: Dict[str, np.ndarray], rel: np.ndarray) -> np.ndarray:
    """Per row: the largest error among the matched forward outputs dumped before it (0 where none): the input
    error of a graph-mode kernel whose inputs the dump cannot compare, estimated from what ran before it."""
    n = rel.shape[0]
    order = np.argsort(cols["order"], kind="stable")
    ok = cols["matched"] & (cols["io"] == IO_OUTPUT) & (cols["direction"] == DIR_FORWARD)
    vals = np.where(ok & np.isfinite(rel), np.nan_to_num(rel, nan=0.0), 0.0)[order]
    before = np.zeros(n)
    if n > 1:
        before[1:] = np.maximum.accumulate(vals)[:-1]
    out = np.zeros(n)
    out[order] = before
    return out


def _dataflow_entries(cols: Dict[str, np.ndarray], fr: RecordFrame, small_value: float, prod: np.ndarray,
                      ie: input_errors.InputErrors, upstream: np.ndarray) -> Dict[str, np.ndarray]:
    """Suspects the dataflow links reveal: target-only regions and gaps (see engines.compare.dataflow). A region
    of graph-mode kernels no matched output feeds takes its input error from ``upstream``."""
    rel = ie.rel
    matched = cols["matched"]
    has = prod >= 0
    usable = has & matched & ~np.isnan(rel)
    p_safe = np.where(has, prod, 0)
    floor_row = np.maximum(small_value, np.maximum(_per_value(cols["target_dtype"], dtype_floor, np.float64),
                                                   _per_value(cols["golden_dtype"], dtype_floor, np.float64)))
    out: Dict[str, list] = {k: [] for k in ("code", "kind", "score", "out_err", "in_err", "floor", "note", "last_op",
                                            "n_ops", "link", "members")}
    from_unmatched = usable & ~matched[p_safe]
    feed = np.full(rel.shape[0], np.nan)
    linked = np.unique(prod[has])
    feed[linked] = ie.carried_by(linked, fr.codes)
    for members, in_e, out_e, consumers in dataflow.target_only_regions(cols, fr.codes, prod,
                                                                          np.flatnonzero(from_unmatched), rel, feed):
        if not out_e > 0:
            continue
        codes = sorted(members, key=lambda c: fr.first_row[c])  # dump order
        first, last = codes[0], codes[-1]
        fl = float(np.max(floor_row[consumers]))
        blind = in_e != in_e and all(str(fr.records[c]).startswith(KERNEL) for c in codes)
        in_e = float(upstream[fr.first_row[first]]) if blind else (0.0 if in_e != in_e else in_e)
        out["code"].append(first)
        out["kind"].append(KIND_REGION)
        out["score"].append(1.0 if (math.isinf(out_e) and math.isinf(in_e)) else out_e / max(in_e, fl))
        out["out_err"].append(out_e)
        out["in_err"].append(in_e)
        out["floor"].append(fl)
        consumer = fr.records[fr.codes[consumers[0]]]
        ordered = [str(fr.records[c]) for c in codes]
        if len(ordered) <= MEMBERS_LISTED:
            out["note"].append("{} target-only op(s) {} -> {}".format(len(ordered), ", ".join(ordered), consumer))
        else:
            out["note"].append("{} target-only op(s) {} ... {} -> {}".format(
                len(members), fr.records[first], fr.records[last], consumer))
        out["last_op"].append(fr.records[last])
        out["n_ops"].append(len(members))
        out["link"].append(consumer)
        out["members"].append(" ".join(ordered))
    from_matched = usable & matched[p_safe] & ~np.isnan(rel[p_safe])
    rows = np.flatnonzero(from_matched)
    if rows.size:
        rel = _like_with_like(cols, rel, rows, prod[rows], ie.measured, small_value)
        src = rel[prod[rows]]
        with np.errstate(invalid="ignore", divide="ignore"):
            jump = rel[rows] / np.maximum(src, floor_row[rows])
        jump[np.isinf(rel[rows]) & np.isinf(src)] = 1.0  # inherited non-finite values
        keep = rows[jump >= GAP_MIN]
        best: Dict[int, int] = {}
        for i in keep.tolist():
            c = int(fr.codes[i])
            if c not in best or rel[i] > rel[best[c]]:
                best[c] = i
        for c, i in best.items():
            p = int(prod[i])
            out["code"].append(c)
            out["kind"].append(KIND_GAP)
            out["score"].append(float(jump[np.searchsorted(rows, i)]))
            out["out_err"].append(float(rel[i]))
            out["in_err"].append(float(rel[p]))
            out["floor"].append(float(floor_row[i]))
            out["note"].append("{} {:.3g}x further off than {} of {} that fed it: golden-only ops between?".format(
                cols["slot"][i], float(jump[np.searchsorted(rows, i)]), cols["slot"][p], cols["record"][p]))
            out["last_op"].append("")
            out["n_ops"].append(1)
            out["link"].append(cols["record"][p])
            out["members"].append("")
    if not out["code"]:
        return {}
    types = {"code": np.int64, "kind": np.uint8, "score": np.float64, "out_err": np.float64, "in_err": np.float64,
             "floor": np.float64, "note": object, "last_op": object, "n_ops": np.int64, "link": object,
             "members": object}
    res = {}
    for k, v in out.items():
        arr = np.empty(len(v), dtype=types[k]) if types[k] is object else np.asarray(v, dtype=types[k])
        if types[k] is object:
            arr[:] = v
        res[k] = arr
    return res


def _like_with_like(cols: Dict[str, np.ndarray], rel: np.ndarray, rows: np.ndarray, producers: np.ndarray,
                    measured: np.ndarray, small_value: float) -> np.ndarray:
    """``rel`` where an input and the output that fed it were measured alike; where one was measured from tensors
    and the other from statistics (``tensor_list``), both rows get their statistics bound, so a gap compares a
    tensor error with a tensor error and a bound with a bound."""
    mixed = measured[rows] != measured[producers]
    if not mixed.any():
        return rel
    both = np.unique(np.concatenate([rows[mixed], producers[mixed]]))
    out = rel.copy()
    from engines.compare.stats_metrics import STATS, scaled_stat_errors

    t = {s: np.asarray(cols["t_" + s], np.float64)[both] for s in STATS}
    g = {s: np.asarray(cols["g_" + s], np.float64)[both] for s in STATS}
    out[both] = scaled_stat_errors(t, g, np.asarray(cols["numel"])[both], small_value)
    return out


def _naive(cols, fr: Optional[RecordFrame], pick_first: bool) -> Optional[str]:
    fr = fr or record_frame(cols)
    with np.errstate(invalid="ignore"):
        ok = (fr.kind == KIND_API) & (fr.out_err > 0)  # no op is named when nothing differs (NaN: unknown)
        if pick_first:
            ok &= fr.direction != DIR_BACKWARD
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    if pick_first:
        best = idx[np.argmin(cols["order"][fr.first_row[idx]])]
    else:
        best = idx[np.argmax(fr.out_err[idx])]
    return str(fr.records[best])


def first_differing(cols: Dict[str, np.ndarray], frame: Optional[RecordFrame] = None) -> Optional[str]:
    """The first forward API record in dump order whose output differs at all (the naive rule, for contrast)."""
    return _naive(cols, frame, True)


def largest_error(cols: Dict[str, np.ndarray], frame: Optional[RecordFrame] = None) -> Optional[str]:
    """The API record with the largest output error (the top of a plain sorted-by-error list); None when no
    output differs."""
    return _naive(cols, frame, False)


def module_rollup(cols: Dict[str, np.ndarray], divergence: Dict[str, np.ndarray],
                  tree: Optional[Dict[str, Optional[str]]] = None,
                  frame: Optional[RecordFrame] = None) -> Dict[str, np.ndarray]:
    """One node per record (and per enclosing module without rows), each with the worst of itself and its
    descendants. ``tree`` (record -> parent) adds ancestors the rows do not name. Nodes come in dump order; the
    root's children have ``parent == ""``."""
    fr = frame or record_frame(cols)
    nodes: List[str] = fr.records.tolist()
    p_codes, p_names = factorize(cols["parent"][fr.first_row])  # few distinct parents
    parent_name = [str(p or "") for p in p_names.tolist()]
    modules = np.flatnonzero(fr.kind == KIND_MODULE)  # parents are module records, few of all records
    index = dict(zip(fr.records[modules].tolist(), modules.tolist()))
    missing = {p for p in parent_name if p and p not in index}
    if missing:  # a parent that is not a module record, or no record at all (added below)
        index.update((r, i) for i, r in enumerate(nodes) if r in missing and r not in index)
    extra_parent: List[str] = []  # parents of the ancestors added below
    tree = tree or {}
    pending = deque(parent_name)
    while pending:  # add ancestors that have no rows, breadth first
        up = pending.popleft()
        if up and up not in index:
            index[up] = len(nodes)
            nodes.append(up)
            extra_parent.append(str(tree.get(up) or ""))
            pending.append(extra_parent[-1])
    n_nodes = len(nodes)
    k = len(fr.records)
    parent = np.empty(n_nodes, dtype=np.int64)
    of_unique = np.array([index[p] if p else -1 for p in parent_name], dtype=np.int64)
    parent[:k] = of_unique[p_codes] if k else 0
    parent[k:] = [index[p] if p else -1 for p in extra_parent]
    v = cols["verdict"]
    counts = {name: np.zeros(n_nodes, np.int64) for name in ("n_rows", "n_pass", "n_warning", "n_error",
                                                             "n_unmatched")}
    counts["n_rows"][:k] = np.bincount(fr.codes, minlength=k)
    for name, code in (("n_pass", PASS), ("n_warning", WARNING), ("n_error", ERROR), ("n_unmatched", UNMATCHED)):
        counts[name][:k] = np.bincount(fr.codes[v == code], minlength=k)
    sev = np.zeros(n_nodes, np.int8)
    sev[:k] = SEVERITY[fr.worst]
    max_rel = np.full(n_nodes, np.nan)
    max_rel[:k] = group_reduce(np.fmax, fr.codes, cols["rel_err"], k, np.nan)
    min_cos = np.full(n_nodes, np.nan)
    min_cos[:k] = group_reduce(np.fmin, fr.codes, cols["cosine"], k, np.nan)
    max_score = np.full(n_nodes, np.nan)
    if len(divergence["record"]):
        pos = fr.codes[divergence["first_row"]]  # each entry's record (a region: its first op)
        np.fmax.at(max_score, pos, divergence["score"])
    first_row = np.full(n_nodes, -1, np.int64)
    first_row[:k] = fr.first_row
    order = np.full(n_nodes, np.iinfo(np.int64).max, np.int64)
    order[:k] = cols["order"][fr.first_row]
    depth = np.zeros(n_nodes, np.int64)
    has_parent = parent >= 0
    for _ in range(n_nodes):
        new = np.where(has_parent, depth[np.maximum(parent, 0)] + 1, 0)
        if np.array_equal(new, depth):
            break
        depth = new
    for d in range(int(depth.max()) if n_nodes else 0, 0, -1):
        child = np.flatnonzero(depth == d)
        up = parent[child]
        for arr in counts.values():
            np.add.at(arr, up, arr[child])
        np.maximum.at(sev, up, sev[child])
        np.fmax.at(max_rel, up, max_rel[child])
        np.fmin.at(min_cos, up, min_cos[child])
        np.fmax.at(max_score, up, max_score[child])
        np.minimum.at(order, up, order[child])
    sort = np.argsort(order, kind="stable")
    node_arr = np.empty(n_nodes, dtype=object)
    node_arr[:] = nodes
    parent_arr = np.empty(n_nodes, dtype=object)
    parent_arr[:k] = np.array(parent_name + [""], dtype=object)[p_codes] if k else []
    parent_arr[k:] = extra_parent
    kind = np.zeros(n_nodes, np.uint8)
    kind[:k] = fr.kind
    kind[k:] = KIND_MODULE
    rank0 = int(cols["rank"][0]) if len(cols["rank"]) else 0
    step0 = int(cols["step"][0]) if len(cols["step"]) else 0
    out = {"rank": np.full(n_nodes, rank0, np.int64), "step": np.full(n_nodes, step0, np.int64),
           "node": node_arr, "parent": parent_arr, "kind": kind, "depth": depth}
    out.update(counts)
    out.update({"worst_verdict": FROM_SEVERITY[sev], "max_rel_err": max_rel, "min_cosine": min_cos,
                "max_score": max_score, "first_row": first_row})
    return {key: val[sort] for key, val in out.items()}

"""First divergence: rank operators by the error they add, and roll results up the module tree.

Error an operator adds (diagnosis-notes 3): ``score = out_err / max(in_err, floor)`` where ``out_err`` is the
largest norm-wise relative error ‖t−g‖/‖g‖ (float64) among its floating outputs and ``in_err`` the largest among its
floating inputs and parameters (for a backward record, also among the inputs and outputs of its forward call,
which the gradient depends on). An op that only inherits an error scores about 1; the op that introduces one
scores far above, even when everything after it differs too (msprobe's stated limitation, §6.1).

``floor`` is the larger of ``small_value`` (2^-20 by default, about where float32 kernels of two devices
differ) and the unit roundoff of the least precise floating dtype among the op's outputs on either side (2^-8
for bfloat16, 2^-11 for float16): an op that computes in bfloat16 adds a few 2^-8 of error by design, so against
a float32 reference it only ranks high when it adds clearly more than its precision explains.

In statistics mode ``rel_err`` is a lower bound computed from max/min/mean/norm; the ranking still works in most
cases, less often than with tensors.

Non-finite values: an output with NaN/inf where the golden is finite has infinite error; if an input is already
non-finite it is inherited (score 1), so the op that *first* produces NaN/inf ranks first. Matching non-finite
values (``-inf`` mask fills) compare as equal and never count.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np

from engines.compare.matching import dtype_class
from engines.compare.verdicts import ERROR, PASS, UNMATCHED, WARNING, F
from engines.parse.names import parse_record
from engines.parse.rows import DIR_BACKWARD, IO_INPUT, IO_OUTPUT, IO_PARAM, KIND_API, KIND_MODULE

DEFAULT_FLOOR = 2.0 ** -20


def _record_groups(records: np.ndarray) -> Dict[str, List[int]]:
    groups: Dict[str, List[int]] = {}
    for i, r in enumerate(records.tolist()):
        groups.setdefault(r, []).append(i)
    return groups


def _max_err(rows: List[int], cols, want_io) -> float:
    best = math.nan
    for i in rows:
        if cols["io"][i] not in want_io or not cols["matched"][i]:
            continue
        if dtype_class(str(cols["target_dtype"][i])) != "float":
            continue
        e = cols["rel_err"][i]
        if math.isnan(e):
            continue
        best = e if math.isnan(best) else max(best, e)
    return best


def _changed_args(rows: List[int], cols) -> str:
    parts = []
    for i in rows:
        if cols["flags"][i] & F["scalar argument changed"]:
            parts.append("{}: {} -> {}".format(cols["slot"][i], _scalar_text(cols, i, "t"),
                                               _scalar_text(cols, i, "g")))
    return "; ".join(parts)


def _scalar_text(cols, i: int, side: str) -> str:
    text = cols.get(side + "_text")
    if text is not None and text[i] is not None:
        return str(text[i])
    v = cols[side + "_max"][i]
    return "{:g}".format(v) if not math.isnan(v) else "None"


UNIT_ROUNDOFF = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "half": 2.0 ** -11, "float8": 2.0 ** -4}


def dtype_floor(dtypes) -> float:
    """Unit roundoff of the least precise low-precision float among ``dtypes`` (0 when none is)."""
    best = 0.0
    for d in dtypes:
        base = str(d).lower().rsplit(".", 1)[-1]
        for key, u in UNIT_ROUNDOFF.items():
            if base.startswith(key):
                best = max(best, u)
    return best


def rank_records(cols: Dict[str, np.ndarray], *, small_value: float = DEFAULT_FLOOR) -> Dict[str, np.ndarray]:
    """The first-divergence table of one piece, best suspect first."""
    groups = _record_groups(cols["record"])
    entries = []
    forward_of: Dict[str, List[int]] = {}
    for record, rows in groups.items():
        rec = parse_record(record)
        if rec.direction == 0 and rec.index is not None:
            forward_of[rec.base + "#" + str(rec.index)] = rows
    for record, rows in groups.items():
        rec = parse_record(record)
        if rec.kind not in (KIND_API, KIND_MODULE):
            continue
        out_err = _max_err(rows, cols, (IO_OUTPUT,))
        if math.isnan(out_err) or out_err <= 0:
            continue
        in_err = _max_err(rows, cols, (IO_INPUT, IO_PARAM))
        if rec.direction == DIR_BACKWARD:
            twin = forward_of.get(rec.base + "#" + str(rec.index))
            if twin:
                fwd = _max_err(twin, cols, (IO_INPUT, IO_PARAM, IO_OUTPUT))
                if not math.isnan(fwd):
                    in_err = fwd if math.isnan(in_err) else max(in_err, fwd)
        entries.append((record, rows, rec, out_err, 0.0 if math.isnan(in_err) else in_err))
    if not entries:
        return _table([])
    has_api = any(e[2].kind == KIND_API for e in entries)
    ranked = []
    for record, rows, rec, out_err, in_err in entries:
        if has_api and rec.kind != KIND_API:
            continue
        outs = [i for i in rows if cols["io"][i] == IO_OUTPUT]
        floor = max(small_value, dtype_floor([cols["target_dtype"][i] for i in outs]
                                             + [cols["golden_dtype"][i] for i in outs]))
        if math.isinf(out_err):
            score = 1.0 if math.isinf(in_err) else math.inf
        else:
            score = out_err / max(in_err, floor)
        worst = max(int(cols["verdict"][i]) for i in rows if cols["verdict"][i] != UNMATCHED) \
            if any(cols["verdict"][i] != UNMATCHED for i in rows) else UNMATCHED
        ranked.append(dict(record=record, kind=rec.kind, direction=rec.direction, score=score, out_err=out_err,
                           in_err=in_err, floor=floor, worst_verdict=worst, first_row=rows[0],
                           order=int(cols["order"][rows[0]]), parent=str(cols["parent"][rows[0]]),
                           changed_args=_changed_args(rows, cols), rank=int(cols["rank"][rows[0]]),
                           step=int(cols["step"][rows[0]])))
    ranked.sort(key=lambda e: (-e["score"], e["order"]))
    return _table(ranked)


_DIV_COLUMNS = (("rank", np.int64), ("step", np.int64), ("position", np.int64), ("record", object),
                ("kind", np.uint8), ("direction", np.uint8), ("score", np.float64), ("out_err", np.float64),
                ("in_err", np.float64), ("floor", np.float64), ("worst_verdict", np.uint8),
                ("first_row", np.int64), ("order", np.int64), ("parent", object), ("changed_args", object))


def _table(entries: List[dict]) -> Dict[str, np.ndarray]:
    out = {}
    for name, dtype in _DIV_COLUMNS:
        if name == "position":
            out[name] = np.arange(1, len(entries) + 1, dtype=np.int64)
            continue
        values = [e[name] for e in entries]
        if dtype is object:
            arr = np.empty(len(values), dtype=object)
            arr[:] = values
        else:
            arr = np.asarray(values, dtype=dtype)
        out[name] = arr
    return out


def first_differing(cols: Dict[str, np.ndarray]) -> Optional[str]:
    """The first API record in dump order whose output differs at all (the naive rule, for contrast)."""
    groups = _record_groups(cols["record"])
    best = None
    for record, rows in groups.items():
        rec = parse_record(record)
        if rec.kind != KIND_API or rec.direction == DIR_BACKWARD:
            continue
        err = _max_err(rows, cols, (IO_OUTPUT,))
        if not math.isnan(err) and err > 0:
            order = int(cols["order"][rows[0]])
            if best is None or order < best[0]:
                best = (order, record)
    return best[1] if best else None


def largest_error(cols: Dict[str, np.ndarray]) -> Optional[str]:
    """The API record with the largest output error (the plain sorted-by-error list's top)."""
    groups = _record_groups(cols["record"])
    best = None
    for record, rows in groups.items():
        if parse_record(record).kind != KIND_API:
            continue
        err = _max_err(rows, cols, (IO_OUTPUT,))
        if not math.isnan(err) and (best is None or err > best[0]):
            best = (err, record)
    return best[1] if best else None


_TREE_COLUMNS = (("rank", np.int64), ("step", np.int64), ("node", object), ("parent", object),
                 ("kind", np.uint8), ("depth", np.int64), ("n_rows", np.int64), ("n_pass", np.int64),
                 ("n_warning", np.int64), ("n_error", np.int64), ("n_unmatched", np.int64),
                 ("worst_verdict", np.uint8), ("max_rel_err", np.float64), ("min_cosine", np.float64),
                 ("max_score", np.float64), ("first_row", np.int64))


def module_rollup(cols: Dict[str, np.ndarray], divergence: Dict[str, np.ndarray],
                  tree: Optional[Dict[str, Optional[str]]] = None) -> Dict[str, np.ndarray]:
    """One node per record (and per enclosing module), each with the worst of itself and its descendants.

    ``tree`` adds parents of modules that have no rows. Nodes come in dump order; the root's children have
    ``parent == ""``.
    """
    groups = _record_groups(cols["record"])
    parent: Dict[str, str] = {}
    for record, rows in groups.items():
        parent[record] = str(cols["parent"][rows[0]] or "")
    for node, up in (tree or {}).items():
        parent.setdefault(node, up or "")
    for node in list(parent):
        up = parent[node]
        while up and up not in parent:
            parent[up] = (tree or {}).get(up) or ""
            up = parent[up]
    score = dict(zip(divergence["record"].tolist(), divergence["score"].tolist()))
    stats: Dict[str, dict] = {}
    for node in parent:
        rows = groups.get(node, [])
        v = cols["verdict"][rows] if rows else np.zeros(0, dtype=np.uint8)
        rel = cols["rel_err"][rows] if rows else np.zeros(0)
        cos = cols["cosine"][rows] if rows else np.zeros(0)
        stats[node] = dict(
            n_rows=len(rows), n_pass=int((v == PASS).sum()), n_warning=int((v == WARNING).sum()),
            n_error=int((v == ERROR).sum()), n_unmatched=int((v == UNMATCHED).sum()),
            worst=_worst(v), max_rel=_nanmax(rel), min_cos=_nanmin(cos), max_score=score.get(node, math.nan),
            first_row=rows[0] if rows else -1)
    depth: Dict[str, int] = {}

    def depth_of(node: str) -> int:
        chain = []
        while node and node not in depth:
            chain.append(node)
            node = parent.get(node, "")
            if len(chain) > 10000:
                break
        base = depth.get(node, -1) if node else -1
        for n in reversed(chain):
            base += 1
            depth[n] = base
        return depth[chain[0]] if chain else base

    for node in parent:
        depth_of(node)
    for node in sorted(parent, key=lambda x: -depth[x]):
        up = parent[node]
        if up and up in stats:
            a, b = stats[up], stats[node]
            for k in ("n_rows", "n_pass", "n_warning", "n_error", "n_unmatched"):
                a[k] += b[k]
            a["worst"] = _worse(a["worst"], b["worst"])
            a["max_rel"] = _nanmax(np.array([a["max_rel"], b["max_rel"]]))
            a["min_cos"] = _nanmin(np.array([a["min_cos"], b["min_cos"]]))
            a["max_score"] = _nanmax(np.array([a["max_score"], b["max_score"]]))
    order = {r: i for i, r in enumerate(groups)}
    nodes = sorted(parent, key=lambda x: (order.get(x, -1) if x in order else _first_desc(x, parent, order), x))
    rank0 = int(cols["rank"][0]) if len(cols["rank"]) else 0
    step0 = int(cols["step"][0]) if len(cols["step"]) else 0
    out: Dict[str, list] = {name: [] for name, _ in _TREE_COLUMNS}
    for node in nodes:
        s = stats[node]
        rec = parse_record(node)
        for name, value in (("rank", rank0), ("step", step0), ("node", node), ("parent", parent[node]),
                            ("kind", rec.kind), ("depth", depth[node]), ("n_rows", s["n_rows"]),
                            ("n_pass", s["n_pass"]), ("n_warning", s["n_warning"]), ("n_error", s["n_error"]),
                            ("n_unmatched", s["n_unmatched"]), ("worst_verdict", s["worst"]),
                            ("max_rel_err", s["max_rel"]), ("min_cosine", s["min_cos"]),
                            ("max_score", s["max_score"]), ("first_row", s["first_row"])):
            out[name].append(value)
    result = {}
    for name, dtype in _TREE_COLUMNS:
        if dtype is object:
            arr = np.empty(len(out[name]), dtype=object)
            arr[:] = out[name]
        else:
            arr = np.asarray(out[name], dtype=dtype)
        result[name] = arr
    return result


def _first_desc(node: str, parent: Dict[str, str], order: Dict[str, int]) -> int:
    best = 1 << 62
    for child, up in parent.items():
        if up == node and child in order:
            best = min(best, order[child])
    return best


# severity order for roll-up: error > warning > unmatched > pass; skipped counts as pass
_SEVERITY = {ERROR: 4, WARNING: 3, UNMATCHED: 2, PASS: 1}


def _worse(a: int, b: int) -> int:
    return a if _SEVERITY.get(a, 0) >= _SEVERITY.get(b, 0) else b


def _worst(v: np.ndarray) -> int:
    worst = PASS
    for code in v.tolist():
        worst = _worse(worst, code)
    return worst


def _nanmax(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.max()) if a.size else math.nan


def _nanmin(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.min()) if a.size else math.nan




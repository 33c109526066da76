"""The evidence of a verdict: the culprit's inputs and outputs against the golden, where it runs; and, when no
single op stands out, each top-level module's share of the error added (docs/DIAGNOSE.md, "Evidence")."""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional

import numpy as np

from engines.compare.divergence import KIND_REGION, SUSPECT_KINDS
from engines.compare.suspects import innermost_frame, is_cast, short_op
from engines.dumps.rows import IO_INPUT, IO_OUTPUT, IO_PARAM, KIND_API

STACK_LINES = 6  # innermost user frames kept in the verdict
_FRAME = re.compile(r"File (.+?), line (\d+), in ([^,\n]+)")  # the stack text our dumps and msprobe's hold
#: probe-tui's own frames that run a target (the target's frames start below them)
_TOOL = re.compile(r"[\\/](engines[\\/](targets|runner|collection)\.py|engines[\\/]diagnose[\\/]|probe_tui[\\/])")
_LIBRARY = re.compile(r"site-packages|dist-packages|<frozen|[\\/]lib[\\/]python\d")  # installed or stdlib code


def _num(v: Any) -> Optional[float]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else (f if math.isfinite(f) else (1e308 if f > 0 else -1e308))


def key_op(group: Dict[str, Any]) -> str:
    """The op a suspect names: its record, or for a target-only region the first op in it that computes (casts
    and views skipped)."""
    members = group.get("members") or []
    if group.get("kind") == SUSPECT_KINDS[KIND_REGION] and members:
        return next((m for m in members if not is_cast(m)), members[0])
    return str(group["record"])


def _rows(cols: Dict[str, Any], record: str, step: int, rank: int) -> np.ndarray:
    if not cols or "record" not in cols:
        return np.zeros(0, np.int64)
    mask = (cols["record"] == record) & (cols["step"] == step) & (cols["rank"] == rank)
    return np.flatnonzero(mask)


def _slot_errors(cols: Dict[str, Any], rows: np.ndarray, ios: tuple) -> List[Dict[str, Any]]:
    out = []
    for i in rows.tolist():
        if int(cols["io"][i]) not in ios or not bool(cols["matched"][i]):
            continue
        err = _num(cols["rel_err"][i])
        if err is None:
            continue
        out.append({"name": "{}.{}".format(cols["record"][i], cols["slot"][i]), "err": err})
    return out


def _region_io(cols: Dict[str, Any], members: List[str], link: str, step: int, rank: int) -> tuple:
    """A region's inputs (the matched outputs feeding it) and outputs (the matched inputs of the op it feeds)."""
    from engines.compare import dataflow

    try:
        prod = dataflow.producers(cols, api_only=True)
    except (KeyError, ValueError):
        return [], []
    inside = set(members)
    ins, outs = [], []
    for member in members:
        for i in _rows(cols, member, step, rank).tolist():
            p = int(prod[i])
            if int(cols["io"][i]) in (IO_INPUT, IO_PARAM) and p >= 0 and bool(cols["matched"][p]):
                err = _num(cols["rel_err"][p])
                if err is not None:
                    ins.append({"name": "{}.{} (feeds {})".format(cols["record"][p], cols["slot"][p], member),
                                "err": err})
    for i in _rows(cols, link, step, rank).tolist():
        p = int(prod[i])
        if int(cols["io"][i]) in (IO_INPUT, IO_PARAM) and p >= 0 and str(cols["record"][p]) in inside:
            err = _num(cols["rel_err"][i])
            if err is not None:
                outs.append({"name": "{}.{} (fed by {})".format(link, cols["slot"][i], cols["record"][p]),
                             "err": err})
    return ins, outs


def _stack_lines(stack: str) -> List[str]:
    """The innermost frames of a stack text that are not library code (``file.py:line in fn: code``); the
    innermost frames whatever they are when all are library code."""
    frames = []
    current = None
    for raw in str(stack or "").splitlines():
        line = raw.strip().rstrip(",")
        if not line:
            continue
        match = _FRAME.match(line + ",")
        if match:
            current = [match.group(1), match.group(2), match.group(3).strip(), ""]
            frames.append(current)
        elif current is not None and not current[3]:
            current[3] = line
    own = [f for f in frames if not (_LIBRARY.search(f[0]) or _TOOL.search(f[0]))] or frames
    return ["{}:{} in {}{}".format(f[0].strip(), f[1], f[2], ": " + f[3] if f[3] else "") for f in own[-STACK_LINES:]]


def culprit(group: Dict[str, Any], cols: Dict[str, Any], divergence: Dict[str, Any],
            explained: float) -> Dict[str, Any]:
    """The verdict's evidence for suspect ``group`` (a compare's suspect group) from that compare's rows."""
    step, rank = int(group.get("step") or 0), int(group.get("rank") or 0)
    op = key_op(group)
    if group.get("kind") == SUSPECT_KINDS[KIND_REGION]:
        inputs, outputs = _region_io(cols, list(group.get("members") or []), str(group.get("link") or ""), step,
                                     rank)
    else:
        rows = _rows(cols, op, step, rank)
        inputs = _slot_errors(cols, rows, (IO_INPUT, IO_PARAM))
        outputs = _slot_errors(cols, rows, (IO_OUTPUT,))
    pos = int(group.get("position") or 0) - 1
    stack = ""
    parent = ""
    if 0 <= pos < len(divergence.get("record", ())):
        stack = str(divergence["stack"][pos] or "") if "stack" in divergence else ""
        parent = str(divergence["parent"][pos] or "")
    op_rows = _rows(cols, op, step, rank)
    if op_rows.size:
        parent = str(cols["parent"][op_rows[0]] or "") or parent
        stack = str(cols["stack"][op_rows[0]] or "") or stack
    in_err = _num(group.get("in_err")) or 0.0
    out_err = _num(group.get("out_err")) or 0.0
    for item in inputs:
        item["matches"] = item["err"] <= explained
    return {
        "op": op, "op_short": short_op(op), "record": group["record"], "kind": group.get("kind"),
        "members": list(group.get("members") or []), "feeds": group.get("link") or "",
        "direction": group.get("direction"), "phase": group.get("phase"),
        "step": step, "rank": rank, "steps": group.get("steps"), "ranks": group.get("ranks"),
        "score": _num(group.get("score")), "in_err": in_err, "out_err": out_err,
        "error_added": max(out_err - in_err, 0.0), "explained_err": explained,
        "inputs": inputs, "outputs": outputs,
        "inputs_match": all(item["matches"] for item in inputs) if inputs else in_err <= explained,
        "output_differs": out_err > explained,
        "module": short_op(parent) if parent else "",
        "where": innermost_frame(stack) or group.get("where") or "",
        "stack": _stack_lines(stack),
    }


def top_module(parent: str) -> str:
    """The top-level module of an op's enclosing module: ``blocks.1`` for ``blocks.1.attn.proj`` (a numbered
    child of a container counts as top level), ``head`` for ``head``; "(model top level)" without one."""
    if not parent:
        return "(model top level)"
    path = short_op(parent)
    parts = path.split(".")
    if len(parts) > 1 and parts[1].isdigit():
        return ".".join(parts[:2])
    return parts[0]


def _own_input_errors(cols: Dict[str, Any]) -> Dict[Any, float]:
    """(rank, step, record) -> the largest error of the op's own inputs, as measured on its input rows: not the
    ranking's ``in_err``, which also carries what flowed in upstream where statistics hide it, and would leave
    every op after the first with nothing added."""
    if not cols or not len(cols.get("record", ())):
        return {}
    io = np.asarray(cols["io"])
    rel = np.asarray(cols["rel_err"], dtype=np.float64)
    rows = np.flatnonzero(((io == IO_INPUT) | (io == IO_PARAM)) & np.isfinite(rel))
    own: Dict[Any, float] = {}
    for rank, step, record, err in zip(np.asarray(cols["rank"])[rows].tolist(), np.asarray(cols["step"])[rows].tolist(),
                                       np.asarray(cols["record"])[rows].tolist(), rel[rows].tolist()):
        key = (rank, step, record)
        if err > own.get(key, 0.0):
            own[key] = err
    return own


def module_shares(divergence: Dict[str, Any], cols: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
    """Each top-level module's share of the error the forward and backward API ops add (output error minus the
    error of the op's own inputs, from the result rows ``cols`` when given; each op once per step and rank),
    largest first."""
    if not divergence or not len(divergence.get("record", ())):
        return []
    kind = divergence["kind"]
    phase = divergence["phase"]
    keep = (kind == KIND_API) & (phase != 2)
    out_e = np.nan_to_num(divergence["out_err"].astype(np.float64), nan=0.0, posinf=0.0)
    in_e = np.nan_to_num(divergence["in_err"].astype(np.float64), nan=0.0, posinf=0.0)
    own = _own_input_errors(cols) if cols else {}
    if own:
        keys = zip(divergence["rank"].tolist(), divergence["step"].tolist(), divergence["record"].tolist())
        in_e = np.asarray([own.get(key, 0.0) for key in keys], dtype=np.float64)
    added = np.where(keep, np.maximum(out_e - in_e, 0.0), 0.0)
    total = float(added.sum())
    if total <= 0:
        return []
    shares: Dict[str, Dict[str, Any]] = {}
    for i in np.flatnonzero(added > 0).tolist():
        name = top_module(str(divergence["parent"][i] or ""))
        entry = shares.setdefault(name, {"module": name, "added": 0.0, "ops": 0, "largest_op": "",
                                         "largest_added": 0.0})
        entry["added"] += float(added[i])
        entry["ops"] += 1
        if added[i] > entry["largest_added"]:
            entry["largest_added"], entry["largest_op"] = float(added[i]), str(divergence["record"][i])
    out = sorted(shares.values(), key=lambda e: -e["added"])
    for e in out:
        e["share"] = e["added"] / total
    return out

"""The printed view of the first-divergence ranking: one line a suspect.

The ranking (:func:`engines.compare.divergence.rank_records`, the HDF5 ``divergence`` table) has one entry per
record and (rank, step). A fault in the model shows up at every step, so the same op or region would fill the
top ten several times over; here entries of the same suspect (same kind, record, region end and dataflow link)
become one group that lists its steps (and ranks) and shows its best entry. Each group says where the op runs:
the enclosing module when the dump records one (mix level, msprobe's construct.json), else the innermost frame
of its call stack (``demo_model.py:92 lowp_softmax``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional

import numpy as np

from engines.compare.divergence import KIND_GAP, KIND_REGION, PHASES, SUSPECT_KINDS
from engines.compare.verdicts import VERDICTS
from engines.dumps.names import direction_word, parse_record
from engines.dumps.rows import DIR_BACKWARD, KIND_API, KIND_MODULE, KIND_PARAM_GRAD

_FRAME = re.compile(r"File (.+?), line (\d+), in ([^,\n]+)")
_LIBRARY = re.compile(r"site-packages|dist-packages|<frozen|[\\/]lib[\\/]python\d")  # installed or stdlib code


def short_op(record: str) -> str:
    """A record as the summary names it inside notes: ``to.0`` for ``Tensor.to.0.forward``, the module path
    for a module record (``blocks.1.attn``)."""
    rec = parse_record(record)
    if rec.kind == KIND_API and rec.index is not None:
        return "{}.{}".format(rec.base.split(".", 1)[-1], rec.index)
    if rec.kind in (KIND_MODULE, KIND_PARAM_GRAD) and rec.module_path:
        return rec.module_path
    return record


#: Ops that only change a tensor's dtype, device or layout: a region is named by the first op that is not one.
CAST_OPS = frozenset(("to", "type", "float", "half", "double", "bfloat16", "contiguous", "clone", "detach", "view",
                      "reshape", "cpu", "cuda", "npu", "astype", "cast"))


def is_cast(record: str) -> bool:
    rec = parse_record(record)
    return rec.kind == KIND_API and rec.base.rsplit(".", 1)[-1] in CAST_OPS


def region_name(members: List[str], name=str) -> Optional[str]:
    """A target-only region by the first op in it that is not a cast or a view and how many more it holds
    (``name(op) +2``); None when it holds one op or nothing else."""
    key = next((m for m in members if not is_cast(m)), None)
    return "{} +{}".format(name(key), len(members) - 1) if key is not None and len(members) > 1 else None


def suspect_record(table: Dict[str, Any], i: int) -> str:
    """Entry ``i`` of a stored ranking by name: its record, or for a target-only region the op that computes in it
    and how many more the region holds (``Demo.naive_softmax.0.forward +2``)."""
    record = str(table["record"][i])
    if int(table["kind"][i]) != KIND_REGION or "members" not in table:
        return record
    return region_name(str(table["members"][i] or "").split()) or record


def innermost_frame(stack: str) -> str:
    """``file.py:line`` of the innermost frame of a stack text that is not library code (torch's own
    ``linear.py`` says nothing about the model); the innermost frame when all are; "" when there is none."""
    frames = _FRAME.findall(stack or "")
    if not frames:
        return ""
    path, line, _ = next((f for f in reversed(frames) if not _LIBRARY.search(f[0])), frames[-1])
    return "{}:{}".format(re.split(r"[\\/]", path.strip())[-1], line)


def location(parent: str, stack: str) -> str:
    """Where an op runs: its enclosing module, else its innermost stack frame."""
    if parent:
        return short_op(parent)
    return innermost_frame(stack)


def numbers_text(values) -> str:
    """``0-3``, ``0,2,5-7``: sorted integers with runs joined."""
    nums = sorted(set(int(v) for v in values))
    parts: List[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else "{}{}{}".format(nums[i], "," if j == i + 1 else "-", nums[j]))
        i = j + 1
    return ",".join(parts)


def _key(div: Dict[str, np.ndarray], i: int) -> tuple:
    return int(div["kind"][i]), str(div["record"][i]), str(div["last_op"][i] or ""), str(div["link"][i] or "")


def group_suspects(div: Dict[str, np.ndarray], results: Dict[str, np.ndarray], limit: int) -> List[Dict[str, Any]]:
    """The first ``limit`` suspects of a merged divergence table (best first), entries of one suspect together."""
    n = len(div.get("record", []))
    if not n or limit <= 0:
        return []
    firsts: Dict[tuple, int] = {}  # the first `limit` suspects, by their best (first) entry
    for i in range(n):
        key = _key(div, i)
        if key not in firsts:
            firsts[key] = i
            if len(firsts) == limit:
                break
    records = {k[1] for k in firsts}
    candidates = np.flatnonzero(np.fromiter((r in records for r in div["record"].tolist()), bool, n))
    members: Dict[tuple, List[int]] = {k: [] for k in firsts}
    for i in candidates.tolist():
        rows = members.get(_key(div, i))
        if rows is not None:
            rows.append(i)
    stacks = results.get("stack")
    out = []
    for key, best in firsts.items():
        rows = np.array(members[key], dtype=np.int64)
        record = key[1]
        row = int(div["first_row"][best])
        if "stack" in div:  # the entry's own stack text (the compare engine keeps it with the ranking)
            stack = str(div["stack"][best] or "")
        else:
            stack = str(stacks[row]) if stacks is not None and 0 <= row < len(stacks) else ""
        out.append({
            "position": int(div["position"][best]), "record": record, "kind": SUSPECT_KINDS[key[0]],
            "direction": direction_word(int(div["direction"][best])), "phase": PHASES[int(div["phase"][best])],
            "score": _num(div["score"][best]), "out_err": _num(div["out_err"][best]),
            "in_err": _num(div["in_err"][best]), "verdict": VERDICTS[int(div["worst_verdict"][best])],
            "rank": int(div["rank"][best]), "step": int(div["step"][best]),
            "steps": sorted(set(div["step"][rows].tolist())), "ranks": sorted(set(div["rank"][rows].tolist())),
            "entries": int(rows.size), "where": location(str(div["parent"][best] or ""), stack),
            "last_op": key[2], "n_ops": int(div["n_ops"][best]), "link": key[3],
            "changed_args": str(div["changed_args"][best] or ""), "note": str(div["note"][best] or ""),
            "members": str(div["members"][best] or "").split() if "members" in div else [],
        })
    return out


def _num(v) -> Optional[float]:
    v = float(v)
    if math.isnan(v):
        return None
    return v if math.isfinite(v) else (1e308 if v > 0 else -1e308)


def _short(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return "{:.3g}".format(v) if abs(v) < 1e300 else "inf"


def suspect_label(group: Dict[str, Any]) -> str:
    """The suspect column: the record; a target-only region as its first op that computes something (casts and
    views skipped) and how many more it holds (``naive_softmax.0 +2 → dropout.3``), or as its first and last op
    when it holds nothing else (``to.0…to.1 → dropout.3``), then the op it feeds."""
    if group["kind"] == SUSPECT_KINDS[KIND_REGION]:
        first, last = short_op(group["record"]), short_op(group["last_op"])
        span = region_name(group.get("members") or [], short_op) or (
            first if first == last else "{}…{}".format(first, last))
        back = " bwd" if group["direction"] == direction_word(DIR_BACKWARD) else ""
        return "{} → {}{}".format(span, short_op(group["link"]), back)
    return group["record"]


def suspect_where(group: Dict[str, Any]) -> str:
    """The last column: where the op runs, then what else is special about it (short)."""
    notes = [group["where"]] if group["where"] else []
    if group["kind"] == SUSPECT_KINDS[KIND_GAP]:
        notes.append("golden-only ops after {}?".format(short_op(group["link"])))
    if group["changed_args"]:
        notes.append(group["changed_args"])
    if group["phase"] == "update":
        notes.append("optimizer update")
    return "; ".join(notes)


TITLE = "Top suspects (score: error an op adds; a +n → c: target-only ops feeding c)"


def suspects_table(groups: List[Dict[str, Any]], multi_rank: bool) -> Dict[str, Any]:
    """The summary table (``{"title", "columns", "rows"}``) of grouped suspects: one line each at 80 columns."""
    rows = []
    for g in groups:
        steps = numbers_text(g["steps"])
        if multi_rank:
            steps = "r{} s{}".format(numbers_text(g["ranks"]), steps)
        rows.append([suspect_label(g), steps, _short(g["score"]), _err(g["out_err"]), suspect_where(g)])
    return {"title": TITLE, "columns": ["suspect", "ranks steps" if multi_rank else "steps", "score", "err",
                                        "where"], "rows": rows}


def _err(v: Optional[float]) -> str:
    if v is None:
        return "-"
    if v == 0 or abs(v) >= 1e300:
        return "0" if v == 0 else "inf"
    if 1e-3 <= abs(v) < 1e3:
        return "{:.2g}".format(v)
    mantissa, exponent = "{:.1e}".format(v).split("e")
    return "{}e{}".format(mantissa, int(exponent))

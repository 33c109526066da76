"""``probe-tui parse PATH --collectives``: the collective records of a probe-tui dump, one line each (op, group,
src/dst, reduce op, dtype, bytes, group_seq from ``args["collective"]``, docs/FORMAT.md), and the collectives the
ranks disagree on.

The n-th collective of a process group is the same collective on every member (``group_seq``), so the ranks'
records of it must agree on op, group, reduce op and dtype: a rank that all-reduces in bfloat16 while the others use
float32, or names another group, is listed under ``mismatches``.
"""

import json
from typing import Any, Dict, List, Optional, Tuple

from engines.dumps.collective import collective_of
from engines.dumps.probe_source import ProbeSource
from engines.parse.inspect import ParseError, _open, _pieces, name_matcher

FIELDS = ("op", "group", "src", "dst", "reduce_op", "dtype", "bytes", "async_op", "group_seq")
AGREE = ("op", "group", "reduce_op", "dtype")  # what every member of one collective must agree on
P2P = {"send": "p2p", "isend": "p2p", "recv": "p2p", "irecv": "p2p"}  # a send and its recv are one message


def collectives(path: Any, *, name: Optional[str] = None, step: Optional[int] = None,
                rank: Optional[int] = None, limit: int = 200) -> Dict[str, Any]:
    """JSON-ready: ``collectives`` (one dict per record, in rank, step, dump order), ``mismatches`` and
    ``tables`` for the one-screen view."""
    source = _open(path)
    try:
        if not isinstance(source, ProbeSource):
            raise ParseError("%s: --collectives reads probe-tui dumps (records carry args.collective); this is %s"
                             % (path, source.describe()))
        match = name_matcher(name)
        found: List[Dict[str, Any]] = []
        for r, s in _pieces(source, step, rank):
            recs = source._reader(r).records(s, ["name", "args"])
            for rec_name, args in zip(recs["name"].tolist(), recs["args"].tolist()):
                if not rec_name.startswith("Distributed.") or (match is not None and not match(rec_name)):
                    continue
                coll = collective_of(args)
                if coll is None:
                    continue
                row = {"rank": r, "step": s, "name": rec_name}
                row.update({k: coll.get(k) for k in FIELDS})
                row["group_name"] = coll.get("group_name", "")
                found.append(row)
    finally:
        source.close()
    mismatches = find_mismatches(found)
    shown = found[:limit]
    tables = [{"title": "collectives (%d)" % len(found),
               "columns": ["rank", "step", "name", "op", "group", "src/dst", "reduce", "dtype", "bytes", "seq"],
               "rows": [[c["rank"], c["step"], c["name"], c["op"], _ranks(c["group"]), _peer(c),
                         c["reduce_op"] or "-", (c["dtype"] or "-").replace("torch.", ""), c["bytes"],
                         c["group_seq"]] for c in shown]}]
    if mismatches:
        tables.append({"title": "ranks disagree on these collectives", "columns": ["group", "seq", "what differs"],
                       "rows": [[m["group_name"], m["group_seq"], m["text"]] for m in mismatches]})
    return {"path": str(path), "collectives": shown, "count": len(found), "mismatches": mismatches,
            "tables": tables}




def _ranks(group: Any) -> str:
    return "[%s]" % ",".join(str(g) for g in group) if isinstance(group, list) else str(group)


def _peer(c: Dict[str, Any]) -> str:
    if c.get("src") is not None:
        return "src %s" % c["src"]
    if c.get("dst") is not None:
        return "dst %s" % c["dst"]
    return "-"


def find_mismatches(found: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Collectives (group, group_seq) whose members' records differ in op, group, reduce op or dtype."""
    by_link: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}
    for c in found:
        if c.get("group_seq") is None:
            continue
        key = (str(c.get("group_name") or _ranks(c.get("group"))), int(c["group_seq"]))
        by_link.setdefault(key, []).append(c)
    out = []
    for (group, seq), members in sorted(by_link.items()):
        diffs = []
        for field in AGREE:
            values = {json.dumps(P2P.get(str(m.get(field)), m.get(field)) if field == "op" else m.get(field))
                      for m in members}
            if len(values) > 1:
                diffs.append("%s: %s" % (field, ", ".join("rank %d %s" % (m["rank"], _text(m.get(field)))
                                                          for m in members)))
        if diffs:
            out.append({"group_name": group, "group_seq": seq, "ranks": [m["rank"] for m in members],
                        "text": "; ".join(diffs)})
    return out


def _text(value: Any) -> str:
    if isinstance(value, list):
        return _ranks(value)
    return str(value).replace("torch.", "")

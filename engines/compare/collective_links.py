"""First divergence across ranks: a collective whose output diverges only because another member's input did is
not where the divergence started.

An all-reduce on rank 0 whose inputs match the golden run but whose output does not adds a large error by the
per-rank score (``engines.compare.divergence``): its error came in through the collective. The target dump's
collective records (``args["collective"]``, docs/FORMAT.md) say which entries of the merged ranking are the same
collective on different ranks (same group, same ``group_seq``). When a member's *input* of that collective
already diverged (its input error is above its floor), every member whose own input did not is demoted to an
inherited score (1) with a note naming the rank(s) it came from, so the op that made the difference on that rank
ranks first, in happens-before order, not the all-reduce on the lowest rank.
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.dumps.collective import collective_of

Link = Tuple[str, int]  # (group key, group_seq)


def _collective(args: Any) -> Optional[Dict[str, Any]]:
    """A collective that links ranks (it has its ``group_seq``)."""
    coll = collective_of(args)
    return coll if coll is not None and coll.get("group_seq") is not None else None


def collective_lookup(source: Any, div: Dict[str, np.ndarray]) -> Dict[Tuple[int, int, str], Dict[str, Any]]:
    """``(rank, step, record) -> args["collective"]`` for the ``Distributed.*`` entries of a ranking, read from a
    probe-tui dump (other dumps carry none: empty)."""
    reader_of = getattr(source, "_reader", None)
    if reader_of is None or not len(div.get("record", ())):
        return {}
    wanted: Dict[Tuple[int, int], set] = {}
    for r, s, name in zip(div["rank"].tolist(), div["step"].tolist(), div["record"].tolist()):
        if str(name).startswith("Distributed."):
            wanted.setdefault((int(r), int(s)), set()).add(str(name))
    out: Dict[Tuple[int, int, str], Dict[str, Any]] = {}
    for (rank, step), names in wanted.items():
        try:
            recs = reader_of(rank).records(step, ["name", "args"])
        except Exception:  # a piece that cannot be read: no links from it
            continue
        for name, args in zip(recs["name"].tolist(), recs["args"].tolist()):
            if name in names:
                coll = _collective(args)
                if coll is not None:
                    out[(rank, step, name)] = coll
    return out


def link_collectives(div: Dict[str, np.ndarray],
                     lookup: Dict[Tuple[int, int, str], Dict[str, Any]]) -> Dict[str, np.ndarray]:
    """The merged ranking with received collectives demoted and noted, re-sorted as the merge sorts it."""
    n = len(div.get("record", ()))
    if not n or not lookup:
        return div
    members: Dict[Link, List[int]] = {}
    colls: Dict[int, Dict[str, Any]] = {}
    for i in range(n):
        coll = lookup.get((int(div["rank"][i]), int(div["step"][i]), str(div["record"][i])))
        if coll is None:
            continue
        colls[i] = coll
        key = str(coll.get("group_name") or coll.get("group"))
        members.setdefault((key, int(coll["group_seq"])), []).append(i)
    score = div["score"].astype(np.float64).copy()
    note = div["note"].copy()
    changed = False
    for link, rows in members.items():
        diverged_in = [i for i in rows if _input_diverged(div, i)]
        if not diverged_in:
            continue
        sources = sorted({int(div["rank"][i]) for i in diverged_in})
        for i in rows:
            if i in diverged_in or int(div["rank"][i]) in sources:
                continue
            coll = colls[i]
            score[i] = min(score[i], 1.0)
            text = "received through %s #%d on group %s from rank %s" % (
                coll.get("op"), link[1], coll.get("group"), ", ".join(map(str, sources)))
            note[i] = (str(note[i]) + "; " + text) if note[i] else text
            changed = True
    if not changed:
        return div
    out = dict(div)
    out["score"], out["note"] = score, note
    order = np.lexsort((out["order"], out["step"], out["rank"], -out["score"], out["tier"]))
    out = {k: v[order] for k, v in out.items()}
    out["position"] = np.arange(1, n + 1, dtype=np.int64)
    return out


def _input_diverged(div: Dict[str, np.ndarray], i: int) -> bool:
    in_err = float(div["in_err"][i])
    return in_err == in_err and in_err > float(div["floor"][i])

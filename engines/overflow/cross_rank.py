"""The first non-finite value of a whole multi-rank run: which rank's op produced it, following collective links.

Each rank's ``overflow`` store lists its flagged calls in the order they finished, each with its ``clock`` (per
process group: how many collectives the rank had issued on it when the call ended) and, for a collective, its
``args["collective"]`` (op, group ranks, ``group_seq``). The n-th collective of a group is one event on all its
members, which orders events across ranks (happens-before):

- A rank's first flagged call that *produced* the values (``produced``, not a collective) is a local origin.
- A rank's first flagged call that *received* them (a collective whose output is non-finite though this rank's
  inputs were not) is explained by a member of the same collective whose values were already bad when it entered
  it: a member whose first flagged call ended before it issued that collective (``clock[group] <= group_seq``),
  or whose record of the same collective had bad inputs. That member's own first call is followed back the same
  way, to a local origin. When every member's store was read and none held bad values before it, the collective
  itself made them (a float16 sum beyond 65504) and is the origin.
- Several local origins are put in happens-before order: A before B when they share a group and A's rank had
  issued fewer of its collectives at A than B's rank had at B (a collective both ranks took part in lies between
  them); otherwise by step, then rank.

The run's origin is the first of them; every rank gets the path its values took (``chain``).
"""

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

RankCalls = Dict[int, List[Dict[str, Any]]]


def first_calls(calls_by_rank: RankCalls) -> Dict[int, Dict[str, Any]]:
    """Each rank's first flagged call (by step, then the order calls finished)."""
    out = {}
    for rank, calls in calls_by_rank.items():
        ordered = sorted(calls, key=lambda c: (int(c.get("step", 0)), int(c.get("order", 0))))
        if ordered:
            out[rank] = ordered[0]
    return out


def _key(coll: Dict[str, Any]) -> str:
    return str(coll.get("group_name") or ",".join(str(r) for r in coll.get("group") or []))


def _bad_before(rank: int, first: Dict[str, Any], calls: List[Dict[str, Any]], key: str, seq: int) -> bool:
    """Did ``rank`` hold bad values when it entered collective ``seq`` of group ``key``?"""
    for c in calls:
        coll = c.get("collective")
        if coll and _key(coll) == key and int(coll.get("group_seq", -1)) == seq:
            return c.get("origin") == "inputs"  # its own record of that collective: were its inputs bad?
    coll = first.get("collective")
    if coll and _key(coll) == key:
        return int(coll.get("group_seq", -1)) < seq
    clock = first.get("clock")
    if clock is None:  # a store without clocks: unknown
        return False
    return int(clock.get(key, 0)) <= seq  # a group the rank had not used yet: none issued


def _sources(rank: int, first: Dict[str, Any], firsts: Dict[int, Dict[str, Any]],
             calls_by_rank: RankCalls) -> List[int]:
    coll = first.get("collective") or {}
    key = _key(coll)
    seq = int(coll.get("group_seq", -1))
    peers = [int(r) for r in coll.get("group") or []]
    src = coll.get("src")
    if coll.get("op") in ("broadcast", "scatter", "recv", "irecv") and src is not None:
        peers = [int(src)]
    out = []
    for peer in peers:
        if peer == rank or peer not in firsts:
            continue
        if _bad_before(peer, firsts[peer], calls_by_rank.get(peer, []), key, seq):
            out.append(peer)
    return out


def _made_by_the_collective(rank: int, first: Dict[str, Any], calls_by_rank: RankCalls,
                            firsts: Dict[int, Dict[str, Any]]) -> bool:
    """A received collective none of whose members held bad values before it, every member's store read."""
    coll = first.get("collective") or {}
    members = [int(r) for r in coll.get("group") or []]
    if not members or any(m not in calls_by_rank for m in members):
        return False
    return not _sources(rank, first, firsts, calls_by_rank)


def _happens_before(a: Tuple[int, Dict[str, Any]], b: Tuple[int, Dict[str, Any]]) -> Optional[bool]:
    """True: a before b; False: b before a; None: not ordered by a shared group."""
    ca, cb = a[1].get("clock") or {}, b[1].get("clock") or {}
    for key in set(ca) | set(cb):
        na, nb = int(ca.get(key, 0)), int(cb.get(key, 0))
        if na < nb:
            return True
        if nb < na:
            return False
    return None


def _order(origins: List[Tuple[int, Dict[str, Any]]]) -> List[Tuple[int, Dict[str, Any]]]:
    """Local origins in happens-before order (step, then rank, where no collective orders them)."""
    out = sorted(origins, key=lambda o: (int(o[1].get("step", 0)), o[0]))
    changed = True
    while changed:  # a few origins at most: bubble the ones a collective orders first
        changed = False
        for i in range(len(out) - 1):
            if _happens_before(out[i], out[i + 1]) is False:
                out[i], out[i + 1] = out[i + 1], out[i]
                changed = True
    return out


def cross_rank_origin(calls_by_rank: RankCalls) -> Optional[Dict[str, Any]]:
    """``{"rank", "step", "name", "reason", "where", "origins": [...], "chain": {rank: text}}`` or None when no
    rank flagged anything. ``calls_by_rank`` holds every rank whose store was read (an empty list: it flagged
    nothing); a collective whose members all were read and none held bad values before it made them itself. ``origins`` lists every local origin in happens-before order (the first is the run's
    origin); ``chain`` says for each flagged rank where its first non-finite value came from."""
    firsts = first_calls(calls_by_rank)
    if not firsts:
        return None
    root_of: Dict[int, List[int]] = {}
    made_here: set = set()  # ranks whose collective itself made the values (no member held any before)

    def roots(rank: int, seen: Tuple[int, ...]) -> List[int]:
        if rank in root_of:
            return root_of[rank]
        first = firsts[rank]
        if first.get("origin") != "received" or rank in seen:
            root_of[rank] = [rank]
            return root_of[rank]
        found: List[int] = []
        if _made_by_the_collective(rank, first, calls_by_rank, firsts):
            made_here.add(rank)
        for peer in _sources(rank, first, firsts, calls_by_rank):
            for r in roots(peer, seen + (rank,)):
                if r not in found:
                    found.append(r)
        root_of[rank] = found or [rank]
        return root_of[rank]

    for rank in sorted(firsts):
        roots(rank, ())
    local = sorted({r for rs in root_of.values() for r in rs})
    ordered = _order([(r, firsts[r]) for r in local])
    rank, first = ordered[0]
    chain = {}
    for r in sorted(firsts):
        f = firsts[r]
        if r in made_here:
            coll = f.get("collective") or {}
            chain[r] = ("%s (step %s): no member of group %s held non-finite values before %s #%s: the collective "
                        "itself made them (a sum beyond its dtype's range?)" % (
                            f.get("name"), f.get("step"), coll.get("group"), coll.get("op"), coll.get("group_seq")))
        elif r in local and f.get("origin") != "received":
            chain[r] = "%s (step %s): %s" % (f.get("name"), f.get("step"), f.get("reason", ""))
        else:
            coll = f.get("collective") or {}
            src = ", ".join("rank %d" % s for s in root_of[r] if s != r) or "an unrecorded rank"
            chain[r] = "%s (step %s) received them through %s #%s on group %s from %s" % (
                f.get("name"), f.get("step"), coll.get("op"), coll.get("group_seq"), coll.get("group"), src)
    reason = chain[rank].split(": ", 1)[1] if rank in made_here else first.get("reason", "")
    return {"rank": rank, "step": first.get("step"), "name": first.get("name"), "origin": first.get("origin"),
            "reason": reason, "where": first.get("where", ""),
            "origins": [{"rank": r, "step": f.get("step"), "name": f.get("name")} for r, f in ordered],
            "chain": chain}


def origin_line(found: Dict[str, Any], ranks: int) -> str:
    """One line for a summary: the run's origin across its ranks."""
    where = " (%s)" % found["where"] if found.get("where") else ""
    more = len(found.get("origins", [])) - 1
    others = "; %d other rank%s produced non-finite values on their own later" % (more, "" if more == 1 else "s") \
        if more > 0 else ""
    return "first non-finite value across %d ranks: rank %s, %s at step %s%s: %s%s" % (
        ranks, found["rank"], found["name"], found["step"], where, found["reason"], others)


def origin_table(found: Dict[str, Any]) -> Dict[str, Any]:
    return {"title": "where each rank's first non-finite value came from (collective links followed)",
            "columns": ["rank", "first flagged call"],
            "rows": [[r, text] for r, text in sorted(found["chain"].items())]}


def read_ranks(rank_dirs: Dict[int, Any]) -> RankCalls:
    """Each rank's flagged calls from its ``overflow`` store (ranks without one are left out)."""
    from engines.overflow.results import read_calls
    from engines.store import StoreError

    out: RankCalls = {}
    for rank, folder in sorted(rank_dirs.items()):
        try:
            out[rank] = read_calls(folder)
        except (StoreError, OSError, ValueError):
            continue
    return out


def wait_for_ranks(rank_dir: Callable[[int], Any], ranks: Sequence[int], timeout_s: float,
                   poll_s: float = 0.2) -> Tuple[Dict[int, Any], List[int]]:
    """({rank: folder} of the ranks whose ``overflow`` store is closed, ranks still missing after ``timeout_s``).

    The other ranks of a launch close their stores about when this one does; a rank that checked no step writes
    none and is waited for until the timeout (bounded: never longer)."""
    from engines.overflow.results import KIND
    from engines.store import StoreError, StoreReader

    deadline = time.monotonic() + max(0.0, timeout_s)
    done: Dict[int, Any] = {}
    while True:
        for rank in ranks:
            if rank in done:
                continue
            folder = rank_dir(rank)
            try:
                with StoreReader(folder, KIND) as r:
                    if r.status != "running":
                        done[rank] = folder
            except (StoreError, OSError, ValueError):
                continue
        missing = [r for r in ranks if r not in done]
        if not missing or time.monotonic() >= deadline:
            return done, missing
        time.sleep(poll_s)

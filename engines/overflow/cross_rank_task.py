"""The cross-rank origin in an ``overflow_check`` launch's summary: the rank that owns the run folder (the one that
prints the launch's summary) waits (bounded) for the checking ranks' ``overflow`` stores to close, then names the rank and op where the run's first non-finite value came from
(``engines.overflow.cross_rank``)."""

import os
from typing import Any, Dict, List, Optional, Sequence

from engines.overflow.cross_rank import (
    cross_rank_origin,
    origin_line,
    origin_table,
    read_ranks,
    wait_for_ranks,
)

WAIT_S = float(os.environ.get("PROBE_TUI_CROSS_RANK_WAIT_S", "30"))


def launch_ranks(selected: Sequence[int] = ()) -> List[int]:
    """The ranks of this launch that check steps: the config's ``rank`` list, else all of ``WORLD_SIZE``."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world = 1
    ranks = list(range(world))
    if selected:
        ranks = [r for r in ranks if r in set(selected)]
    return ranks


def add_cross_rank(out: Dict[str, Any], run: Any, rank: Optional[int], ranks: List[int],
                   wait_s: float = WAIT_S) -> None:
    """On the rank that owns the run folder (it prints the launch's one summary), with more than one checking rank:
    ``out["cross_rank_origin"]``, a verdict line and a table saying where each rank's first non-finite value came
    from. Without an owner flag (a run object of another kind), the first checking rank."""
    if run is None or rank is None or len(ranks) < 2:
        return
    owner = getattr(run, "owner", None)
    if not (owner if owner is not None else rank == ranks[0]):
        return
    found_dirs, missing = wait_for_ranks(run.rank_dir, ranks, wait_s)
    found = cross_rank_origin(read_ranks(found_dirs))
    if missing:
        note(out, "cross-rank origin: rank%s %s did not close an overflow store within %.0f s (left out)"
             % ("s" if len(missing) > 1 else "", ", ".join(map(str, missing)), wait_s))
    if found is None:
        return
    out["cross_rank_origin"] = found
    out["verdict"] = origin_line(found, len(ranks)) + ". This rank: " + out.get("verdict", "")
    out.setdefault("tables", []).insert(0, origin_table(found))


def note(out: Dict[str, Any], text: str) -> None:
    """A line in the summary's ``notes`` table (made when missing)."""
    tables = out.setdefault("tables", [])
    for t in tables:
        if t.get("title") == "notes":
            t["rows"].append([text])
            return
    tables.append({"title": "notes", "columns": ["note"], "rows": [[text]]})

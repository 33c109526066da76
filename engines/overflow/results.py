"""The ``overflow`` store of a rank folder: what each checked step found (docs/OVERFLOW.md).

Tables (kind ``overflow``, schema version 1):

- ``steps``: one row per checked step: ``step``, ``checked`` (calls classified), ``flagged``, ``masks`` (calls
  whose non-finite values all came from a mask or fill), ``first`` (name of the step's first origin, "" when the
  step is clean), ``first_origin`` (``produced``/``inputs``/""), ``first_reason``, ``first_parent``, ``stopped``
  (``overflow_nums`` was reached in this step).
- ``calls``: one row per flagged call: ``step``, ``order`` (position among the step's flagged calls, in the order
  the calls finished), ``name`` (the record name, also in the ``dump`` store when ``kept``), ``kind``, ``direction``,
  ``origin``, ``reason``, ``parent`` (enclosing module), ``kept`` (its record and tensors are in the dump store),
  ``first`` (it is the step's first origin), ``nonfinite`` (JSON: slot -> kinds), ``not_saved`` (JSON: slot ->
  why a tensor of a kept call could not be saved), ``where`` (the code line that made the call, when known),
  ``collective`` (JSON: the call's ``args["collective"]`` when it is a collective, "" otherwise) and ``clock``
  (JSON: process-group key -> collectives this rank had issued on that group when the call ended; the link the
  cross-rank origin follows, ``engines.overflow.cross_rank``). Stores written before these two columns lack them.

The flagged calls' records and tensors are in the rank's ``dump`` store under the same step and name.
"""

import json
from typing import Any, Dict, List, Optional

from engines.overflow.report import StepFindings
from engines.store import Column, StoreReader, StoreWriter, TableSpec

KIND = "overflow"
SCHEMA_VERSION = 1

STEPS = TableSpec("steps", (
    Column("step", "int64"),
    Column("checked", "int64", default=0),
    Column("flagged", "int64", default=0),
    Column("masks", "int64", default=0),
    Column("first", "str", default=""),
    Column("first_origin", "str", default=""),
    Column("first_reason", "json", default=""),
    Column("first_parent", "str", default=""),
    Column("stopped", "bool", default=False),
))

CALLS = TableSpec("calls", (
    Column("step", "int64"),
    Column("order", "int64"),
    Column("name", "str"),
    Column("kind", "str"),
    Column("direction", "str"),
    Column("origin", "str"),
    Column("reason", "json", default=""),
    Column("parent", "str", default=""),
    Column("kept", "bool", default=False),
    Column("first", "bool", default=False),
    Column("nonfinite", "json", default="{}"),
    Column("not_saved", "json", default="{}"),
    Column("where", "json", default=""),
    Column("collective", "json", default=""),
    Column("clock", "json", default="{}"),
))

TABLES = (STEPS, CALLS)


class OverflowWriter:
    """Appends and commits one step's findings at a time."""

    def __init__(self, rank_dir: Any, meta: Dict[str, Any], mode: str = "auto") -> None:
        meta = dict(meta)
        meta.setdefault("schema_version", SCHEMA_VERSION)
        self.store = StoreWriter(rank_dir, KIND, TABLES, meta=meta, mode=mode)

    def write(self, findings: StepFindings) -> None:
        first = findings.first
        self.store.append("steps", step=[findings.step], checked=[findings.checked], flagged=[findings.flagged],
                          masks=[findings.masks], first=[first.name if first else ""],
                          first_origin=[first.origin_name if first else ""],
                          first_reason=[first.reason if first else ""],
                          first_parent=[first.parent if first else ""], stopped=[findings.stopped])
        calls = [c.as_dict() for c in findings.calls]
        if calls:
            self.store.append(
                "calls", step=[findings.step] * len(calls), order=[c["order"] for c in calls],
                name=[c["name"] for c in calls], kind=[c["kind"] for c in calls],
                direction=[c["direction"] for c in calls], origin=[c["origin"] for c in calls],
                reason=[c["reason"] for c in calls], parent=[c["parent"] for c in calls],
                kept=[c["kept"] for c in calls],
                first=[first is not None and c["order"] == first.order for c in calls],
                nonfinite=[json.dumps(c["nonfinite"]) for c in calls],
                not_saved=[json.dumps(c["not_saved"]) for c in calls], where=[c["where"] for c in calls],
                collective=[json.dumps(c["collective"]) if c["collective"] else "" for c in calls],
                clock=[json.dumps(c["clock"]) for c in calls])
        self.store.commit(findings.step, flagged=findings.flagged)

    def close(self, status: str = "finished") -> None:
        self.store.close(status)


def read_steps(rank_dir: Any) -> List[Dict[str, Any]]:
    """The ``steps`` rows of a rank folder as dicts, in step order."""
    with StoreReader(rank_dir, KIND) as r:
        cols = r.read("steps")
    return _rows(cols)


def read_calls(rank_dir: Any, step: Optional[int] = None) -> List[Dict[str, Any]]:
    """The ``calls`` rows (all steps, or one), with ``nonfinite``/``not_saved`` decoded."""
    with StoreReader(rank_dir, KIND) as r:
        cols = r.read("calls", steps=None if step is None else [int(step)])
    rows = _rows(cols)
    for row in rows:
        had_clock = "clock" in row  # stores written before the column: the clock is unknown (None)
        for key in ("nonfinite", "not_saved", "clock"):
            value = row.get(key)
            row[key] = json.loads(value) if isinstance(value, str) and value else {}
        if not had_clock:
            row["clock"] = None
        value = row.get("collective")
        row["collective"] = json.loads(value) if isinstance(value, str) and value else None
    return rows


def _rows(cols: Dict[str, Any]) -> List[Dict[str, Any]]:
    names = list(cols)
    if not names:
        return []
    n = len(cols[names[0]])
    out = []
    for i in range(n):
        row = {}
        for k in names:
            v = cols[k][i]
            row[k] = v.item() if hasattr(v, "item") else v
        out.append(row)
    return out

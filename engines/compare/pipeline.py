"""Pipeline stages stitched into one model: API call indices renumbered across stages, micro-batches found.

Each stage's ranks count their API calls from 0 (``Functional.linear.0.forward`` on every stage), while a
single-process run counts them through the whole model. The stitched order is the order one process running the
same micro-batches one after another would call them in: micro-batch by micro-batch, stage by stage; a call's
micro-batch is the call index of its outermost enclosing module record (the stage's module runs once per
micro-batch), 0 where the dump records no modules. A backward call keeps the index of its forward call.
Module records are named by their module path, which the stages keep: they are not renamed.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines.dumps.rows import DIR_BACKWARD, DIR_FORWARD, KIND_API, RowTable

_WORDS = {"forward": DIR_FORWARD, "backward": DIR_BACKWARD}


def split_call(record: str) -> Optional[Tuple[str, int, str]]:
    """``("Functional.linear", 3, "forward")`` of an API record name, None for other names."""
    parts = record.rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdigit() or parts[2] not in _WORDS:
        return None
    return parts[0], int(parts[1]), parts[2]


def micro_batch(record: str, parent: str, tree: Dict[str, Optional[str]]) -> int:
    """Call index of the outermost module record enclosing ``record`` (``parent``: its enclosing module)."""
    node = parent or (record if record.startswith("Module.") else "")
    hops = 0
    while node and tree.get(node) and hops < 1000:
        node = tree[node] or ""
        hops += 1
    last = node.rsplit(".", 1)[-1] if node else ""
    return int(last) if last.isdigit() else 0


def stitch_stages(stages: Sequence[Sequence[RowTable]], trees: Sequence[Dict[str, Optional[str]]]
                  ) -> Tuple[List[List[RowTable]], Dict[str, int]]:
    """Every stage's tables (one per tensor-parallel rank) with API records renamed to their whole-model call
    index, and the micro-batch of every (renamed) record."""
    mb_of: List[Dict[str, int]] = []
    calls: List[Tuple[int, int, int, str, int]] = []  # (micro-batch, stage, first row, prefix, index)
    for s, tables in enumerate(stages):
        head = tables[0]
        mbs: Dict[str, int] = {}
        for i, (record, parent, kind) in enumerate(zip(head.record.tolist(), head.parent.tolist(),
                                                       head.kind.tolist())):
            if record in mbs:
                continue
            mbs[record] = micro_batch(record, str(parent or ""), trees[s])
            call = split_call(record) if kind == KIND_API else None
            if call is not None and call[2] == "forward":
                calls.append((mbs[record], s, i, call[0], call[1]))
        mb_of.append(mbs)
    calls.sort()
    counter: Dict[str, int] = {}
    new_index: List[Dict[Tuple[str, int], int]] = [{} for _ in stages]
    for _, s, _, prefix, index in calls:
        if (prefix, index) not in new_index[s]:
            new_index[s][(prefix, index)] = counter.get(prefix, 0)
            counter[prefix] = counter.get(prefix, 0) + 1
    out: List[List[RowTable]] = []
    record_mb: Dict[str, int] = {}
    for s, tables in enumerate(stages):
        renames: Dict[str, str] = {}
        for record, mb in mb_of[s].items():
            call = split_call(record)
            new = record
            if call is not None:
                key = (call[0], call[1])
                if key not in new_index[s]:  # a backward call whose forward this stage did not record
                    new_index[s][key] = counter.get(call[0], 0)
                    counter[call[0]] = counter.get(call[0], 0) + 1
                new = "{}.{}.{}".format(call[0], new_index[s][key], call[2])
            renames[record] = new
            record_mb[new] = mb
        out.append([_renamed(t, renames) for t in tables])
    return out, record_mb


def _renamed(table: RowTable, renames: Dict[str, str]) -> RowTable:
    if all(k == v for k, v in renames.items()):
        return table
    out = table.take(np.arange(len(table)))
    records = out.record.tolist()
    is_api = out.kind == KIND_API
    new = np.empty(len(records), dtype=object)
    new[:] = [renames.get(r, r) if api else r for r, api in zip(records, is_api.tolist())]
    names = np.empty(len(records), dtype=object)
    names[:] = [r + "." + s for r, s in zip(new.tolist(), out.slot.tolist())]
    out.record, out.name = new, names
    out.args = {renames.get(k, k): v for k, v in table.args.items()}
    out._groups = None
    return out

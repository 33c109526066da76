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

from engines.dumps.rows import DIR_BACKWARD, DIR_FORWARD, KIND_API, KIND_PARAM_GRAD, RowTable

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


def _renamed(table: RowTable, renames: Dict[str, str], every_kind: bool = False) -> RowTable:
    if all(k == v for k, v in renames.items()):
        return table
    out = table.take(np.arange(len(table)))
    records = out.record.tolist()
    rename = np.ones(len(records), dtype=bool) if every_kind else out.kind == KIND_API
    new = np.empty(len(records), dtype=object)
    new[:] = [renames.get(r, r) if yes else r for r, yes in zip(records, rename.tolist())]
    names = np.empty(len(records), dtype=object)
    names[:] = [r + "." + s for r, s in zip(new.tolist(), out.slot.tolist())]
    out.record, out.name = new, names
    out.args = {renames.get(k, k): v for k, v in table.args.items()}
    out._groups = None
    return out


def call_key(record: str) -> Optional[Tuple[str, int]]:
    """(call family, call index): ``("Functional.linear.forward", 3)`` of an API record, ``("Module.up.Linear
    .forward", 0)`` of a module record; None for names without a call index."""
    call = split_call(record)
    if call is not None:
        return "{}.{}".format(call[0], call[2]), call[1]
    head, _, last = record.rpartition(".")
    return (head, int(last)) if head and last.isdigit() else None


def _forward_counts(tables: Sequence[RowTable]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for t in tables:
        seen = set()
        for record, kind in zip(t.record.tolist(), t.kind.tolist()):
            if record in seen or kind == KIND_PARAM_GRAD or record.startswith("Distributed."):
                continue
            seen.add(record)
            key = call_key(record)
            if key is not None and key[0].endswith("forward"):
                counts[key[0]] = counts.get(key[0], 0) + 1
    return counts


def micro_batch_count(stage_heads: Sequence[RowTable], golden: RowTable) -> int:
    """How many micro-batches the target ran for one golden call: the one ratio of the target's forward call
    counts (all stages together) to the golden's, over the call families both record; 1 when they do not agree."""
    t_counts, g_counts = _forward_counts(stage_heads), _forward_counts([golden])
    ratios = {t_counts[k] / g_counts[k] for k in t_counts.keys() & g_counts.keys() if g_counts[k]}
    if len(ratios) != 1:
        return 1
    m = ratios.pop()
    return int(m) if m == int(m) and m > 1 else 1


def fold_micro_batches(table: RowTable, m: int) -> Optional[List[RowTable]]:
    """A stage rank's rows as ``m`` tables, one per micro-batch, its calls renamed to their index within the
    micro-batch (the k-th call of a family is in micro-batch ``k // (calls / m)``: forwards run micro-batch by
    micro-batch); rows without a call index (parameter gradients) are in every table. None when a family's calls
    do not divide by ``m``."""
    records = table.record.tolist()
    kind_of: Dict[str, int] = {}
    for record, kind in zip(records, table.kind.tolist()):
        kind_of.setdefault(record, kind)
    families: Dict[str, List[int]] = {}
    api: Dict[str, bool] = {}
    for record, kind in kind_of.items():
        key = call_key(record) if kind != KIND_PARAM_GRAD else None
        if key is not None:
            families.setdefault(key[0], []).append(key[1])
            api[key[0]] = split_call(record) is not None
    where: Dict[str, Tuple[int, str]] = {}
    for family, indices in families.items():
        # an API's backward call keeps its forward's index; a module's backward calls are counted on their own
        forward = family[: -len("backward")] + "forward"
        own = families[forward] if api[family] and family.endswith(".backward") and forward in families \
            else indices
        own = sorted(set(own))
        if len(own) % m:
            return None
        per = len(own) // m
        pos = {idx: i for i, idx in enumerate(own)}
        for idx in indices:
            if idx not in pos:
                return None
            mb, within = divmod(pos[idx], per)
            where[_named(family, idx, api[family])] = (mb, _named(family, within, api[family]))
    mb_of = np.array([where.get(r, (-1, r))[0] for r in records], dtype=np.int64)
    out = []
    for mb in range(m):
        part = table.take(np.flatnonzero((mb_of == mb) | (mb_of < 0)))
        out.append(_renamed(part, {old: new for old, (b, new) in where.items() if b == mb}, every_kind=True))
    return out


def _named(family: str, index: int, is_api: bool) -> str:
    """The record name of call ``index`` of a family (inverse of :func:`call_key`)."""
    if not is_api:
        return "{}.{}".format(family, index)
    head, _, direction = family.rpartition(".")
    return "{}.{}.{}".format(head, index, direction)

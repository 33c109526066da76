"""Pair target rows with golden rows: exact keys (a hash join) or fuzzy alignment, then the dtype gate.

Result: for every target row the golden row index or -1. Golden-only rows are counted and listed separately
(msprobe drops them silently). Unmatched target rows stay unmatched (msprobe 26.2 marks them "pass").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from engines.compare import kernel_map, ms_pt_names
from engines.compare.dtypes import dtype_class, dtype_compatible
from engines.compare.dunders import align_msprobe_dunders
from engines.compare.fuzzy import align_records, fuzzy_record_key
from engines.compare.mapping import KeyOptions, side_keys
from engines.dumps.rows import RowTable


@dataclass
class Match:
    golden_index: np.ndarray  # int64 per target row, -1 unmatched
    fuzzy: np.ndarray  # bool: paired by alignment with a different name
    gated: np.ndarray  # bool: names matched but dtypes of incompatible classes (golden treated as unmatched)
    golden_only: np.ndarray  # golden row indices no target row took
    # bool: a graph-mode kernel paired with an API record (engines/compare/kernel_map.py); None: no such row
    kernel_paired: Optional[np.ndarray] = None


def exact_pairs(t_keys: np.ndarray, g_keys: np.ndarray) -> np.ndarray:
    if t_keys.shape == g_keys.shape and bool(np.all(t_keys == g_keys)) and \
            len(set(g_keys.tolist())) == g_keys.shape[0]:
        return np.arange(t_keys.shape[0], dtype=np.int64)  # the two dumps list the same rows in the same order
    lookup: Dict[str, int] = {}
    for i, k in enumerate(g_keys.tolist()):
        lookup.setdefault(k, i)
    get = lookup.get
    return np.fromiter((get(k, -1) for k in t_keys.tolist()), dtype=np.int64, count=len(t_keys))


def _record_signatures(rows: RowTable, keys: np.ndarray
                       ) -> Tuple[List[str], Dict[str, Dict[str, int]], List[Tuple[str, tuple]]]:
    """Per record (dump order): first row, slots, and the alignment signature."""
    order: List[str] = []
    slots: Dict[str, Dict[str, int]] = {}
    sig_parts: Dict[str, list] = {}
    key_record: Dict[str, str] = {}
    for i, (record, slot, key) in enumerate(zip(rows.record.tolist(), rows.slot.tolist(), keys.tolist())):
        if record not in slots:
            order.append(record)
            slots[record] = {}
            sig_parts[record] = []
            key_record[record] = key[: len(key) - len(slot) - 1] if key.endswith("." + slot) else record
        slots[record].setdefault(slot, i)
        sig_parts[record].append((slot, rows.shape[i], dtype_class(rows.dtype[i])))
    sigs = [(fuzzy_record_key(key_record[r]), tuple(sig_parts[r])) for r in order]
    return order, slots, sigs


def fuzzy_pairs(t_rows: RowTable, g_rows: RowTable, t_keys: np.ndarray, g_keys: np.ndarray) -> np.ndarray:
    t_order, t_slots, t_sigs = _record_signatures(t_rows, t_keys)
    g_order, g_slots, g_sigs = _record_signatures(g_rows, g_keys)
    out = np.full(len(t_rows), -1, dtype=np.int64)
    for i, j in align_records(t_sigs, g_sigs):
        g_map = g_slots[g_order[j]]
        for slot, row in t_slots[t_order[i]].items():
            out[row] = g_map.get(slot, -1)
    return out


def kernels_as_apis(t_rows: RowTable, g_rows: RowTable, opts: KeyOptions) -> Tuple[RowTable, RowTable]:
    """A graph-mode kernel dump against API records: the kernels named as the API records they stand for
    (engines/compare/kernel_map.py), for building the keys. Unchanged when both sides, or neither, hold kernels,
    or a data mapping names the rows."""
    if opts.data_mapping or opts.layer_mapping is not None:
        return t_rows, g_rows
    t_k, g_k = kernel_map.has_kernels(t_rows), kernel_map.has_kernels(g_rows)
    if t_k == g_k:
        return t_rows, g_rows
    if t_k:
        user = {e["ms_api"]: e["pt_api"] for e in (opts.api_mapping or [])}
        to_golden = (lambda api: ms_pt_names.map_api(api, user)) if opts.map_mindspore else (lambda api: api)
        return kernel_map.renamed_kernels(t_rows, g_rows, to_golden), g_rows
    return t_rows, kernel_map.renamed_kernels(g_rows, t_rows, lambda api: api)


def match_rows(t_rows: RowTable, g_rows: RowTable, opts: KeyOptions, *, fuzzy: bool = False,
               cross_framework: bool = False) -> Match:
    t_named, g_named = kernels_as_apis(t_rows, g_rows, opts)
    t_keys = side_keys(t_named, opts, is_target=True)
    g_keys = side_keys(g_named, opts, is_target=False)
    if opts.msprobe_side and not opts.data_mapping and opts.layer_mapping is None:
        if opts.msprobe_side == "golden":
            g_keys = align_msprobe_dunders(t_rows, t_keys, g_rows, g_keys)
        else:
            t_keys = align_msprobe_dunders(g_rows, g_keys, t_rows, t_keys)
    if fuzzy and not opts.data_mapping and opts.layer_mapping is None:
        gi = fuzzy_pairs(t_rows, g_rows, t_keys, g_keys)
        renamed = np.zeros(len(t_rows), dtype=bool)
        hit = gi >= 0
        renamed[hit] = t_keys[hit] != g_keys[gi[hit]]
    else:
        gi = exact_pairs(t_keys, g_keys)
        renamed = np.zeros(len(t_rows), dtype=bool)
    gated = np.zeros(len(t_rows), dtype=bool)
    if not opts.data_mapping:
        paired = np.flatnonzero(gi >= 0)
        t_dt = t_rows.dtype[paired]
        g_dt = g_rows.dtype[gi[paired]]
        differ = np.flatnonzero(t_dt != g_dt)
        for p in differ:
            if not dtype_compatible(t_dt[p], g_dt[p], cross_framework):
                gated[paired[p]] = True
        gi = np.where(gated, -1, gi)
    taken = np.zeros(len(g_rows), dtype=bool)
    taken[gi[gi >= 0]] = True
    return Match(golden_index=gi, fuzzy=renamed, gated=gated, golden_only=np.flatnonzero(~taken),
                 kernel_paired=_kernel_paired(gi, t_rows, t_named, g_rows, g_named))


def _kernel_paired(gi: np.ndarray, t_rows: RowTable, t_named: RowTable, g_rows: RowTable, g_named: RowTable
                   ) -> Optional[np.ndarray]:
    """Rows paired through a kernel renamed as an API record (on either side); None when no kernel was."""
    if t_named is t_rows and g_named is g_rows:
        return None
    hit = np.flatnonzero(gi >= 0)
    out = np.zeros(len(t_rows), dtype=bool)
    out[hit] = (t_named.record[hit] != t_rows.record[hit]) | (g_named.record[gi[hit]] != g_rows.record[gi[hit]])
    return out

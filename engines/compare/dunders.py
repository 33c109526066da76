"""msprobe's operator names against ours: ``a * b`` is ``Tensor.__mul__`` there, ``Tensor.mul`` here.

torch hands ``Tensor.__mul__`` to ``Tensor.mul`` before any mode sees it, so our capture names every
multiplication ``Tensor.mul`` with one call counter, while msprobe (which patches the dunders) counts
``Tensor.__mul__``, ``Tensor.__rmul__`` and explicit ``Tensor.mul`` calls separately. Renaming alone would
leave the call indices shifted, so for each family (``Tensor.mul`` = ``__mul__`` + ``__rmul__`` + ``mul``;
``engines.capture.naming.MSPROBE_DUNDER_ALIASES``) and direction the two sequences of calls are aligned in dump
order — a diff on the records' tensor shapes and dtype classes, then in order between anchors — and msprobe's
records take the name of the call they pair with. Calls only one side recorded stay unmatched (msprobe's under a
name no record of ours has).

What still cannot pair: a family whose calls differ in number and look alike (same shapes) is paired in order,
so one missing call pairs the later ones with their neighbours; operators our capture records under another
name altogether (torch functions msprobe reaches through a different wrapper) are not families here.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from engines.capture.naming import MSPROBE_DUNDER_ALIASES
from engines.compare.dtypes import dtype_class
from engines.compare.fuzzy import align_records
from engines.dumps.names import parse_record
from engines.dumps.rows import DIR_NONE, KIND_API, RowTable

PREFIX = "Tensor"
FAMILY_APIS = set(MSPROBE_DUNDER_ALIASES.values())


def family_of(api: str) -> str:
    """Our API name for an msprobe Tensor API name ("" when it is in no family)."""
    if api in MSPROBE_DUNDER_ALIASES:
        return MSPROBE_DUNDER_ALIASES[api]
    return api if api in FAMILY_APIS else ""


def _members(rows: RowTable, keys: np.ndarray, theirs: bool) -> Dict[Tuple[str, int], List[Tuple[str, tuple]]]:
    """(family, direction) -> [(record key, signature)] in dump order; a signature lists the record's tensor
    rows as (slot, shape, dtype class)."""
    out: Dict[Tuple[str, int], List[Tuple[str, tuple]]] = {}
    sigs: Dict[str, list] = {}
    where: Dict[str, Tuple[str, int]] = {}
    for key, slot, shape, dtype, tensor in zip(keys.tolist(), rows.slot.tolist(), rows.shape.tolist(),
                                               rows.dtype.tolist(), rows.is_tensor.tolist()):
        record = key[:-len(slot) - 1] if key.endswith("." + slot) else key
        if record not in sigs:
            if not record.startswith(PREFIX + ".") or "." not in record[len(PREFIX) + 1:]:
                continue
            rec = parse_record(record)
            if rec.kind != KIND_API or rec.direction == DIR_NONE or rec.index is None:
                continue
            api = rec.base[len(PREFIX) + 1:]
            fam = family_of(api) if theirs else (api if api in FAMILY_APIS else "")
            if not fam:
                continue
            sigs[record] = []
            where[record] = (fam, rec.direction)
            out.setdefault((fam, rec.direction), []).append((record, ()))
        if tensor:
            sigs[record].append((slot, shape, dtype_class(str(dtype))))
    return {k: [(r, tuple(sigs[r])) for r, _ in v] for k, v in out.items()}


def align_msprobe_dunders(ours: RowTable, our_keys: np.ndarray, theirs: RowTable,
                          their_keys: np.ndarray) -> np.ndarray:
    """msprobe's keys with the records of each operator family renamed after the call of ours they align with."""
    text = "\n".join(theirs.record_order())
    if "Tensor.__" not in text:
        return their_keys
    mine = _members(ours, our_keys, theirs=False)
    other = _members(theirs, their_keys, theirs=True)
    rename: Dict[str, str] = {}
    for group, their_records in other.items():
        if not any(parse_record(r).base[len(PREFIX) + 1:] in MSPROBE_DUNDER_ALIASES for r, _ in their_records):
            continue  # only explicit calls: the names already agree
        fam, _ = group
        our_records = mine.get(group, [])
        pairs = align_records([(fam, s) for _, s in our_records], [(fam, s) for _, s in their_records])
        paired = set()
        for i, j in pairs:
            rename[their_records[j][0]] = our_records[i][0]
            paired.add(j)
        for j, (record, _) in enumerate(their_records):
            if j not in paired:
                rename[record] = record + "#msprobe"  # a name no record of ours has
    if not rename:
        return their_keys
    out = np.empty(their_keys.shape[0], dtype=object)
    out[:] = [_renamed(k, s, rename) for k, s in zip(their_keys.tolist(), theirs.slot.tolist())]
    return out


def _renamed(key: str, slot: str, rename: Dict[str, str]) -> str:
    if not key.endswith("." + slot):
        return key
    record = key[:-len(slot) - 1]
    new = rename.get(record)
    return key if new is None else new + "." + slot

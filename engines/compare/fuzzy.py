"""Fuzzy matching as a sequence alignment (Myers' O((N+M)·D) diff), anchored in two passes.

msprobe's fuzzy mode drops call indices and pairs rows with a greedy O(n²) queue; for modules it drops the class
name instead of the index (docs/reference/msprobe-analysis.md §1.6.3 and §7 item 2). We align **records** in dump order:

1. signature = (record name without call index, class kept) + the (slot, shape, dtype class) of its rows; a
   Myers diff of the two signature sequences gives anchors;
2. between consecutive anchors, a second diff on the name alone pairs records whose shape or dtype changed (they
   are then reported as shape/dtype mismatches, not silently dropped);
3. rows of paired records pair by slot.

Long runs of differences (D above ``max_d``) fall back to a windowed in-order scan, so the cost stays
O((N+M)·max_d) at worst; identical prefixes and suffixes are trimmed first.
"""

from __future__ import annotations

from typing import Dict, Hashable, List, Optional, Sequence, Tuple, TypeVar

from engines.dumps.names import parse_record
from engines.dumps.rows import DIR_NONE, KIND_API, KIND_MODULE, KIND_PARAM_GRAD

Pair = Tuple[int, int]
_K = TypeVar("_K", bound=Hashable)


def fuzzy_record_key(record: str) -> str:
    """A record name without its call index; unlike msprobe, a module keeps its class name."""
    rec = parse_record(record)
    tokens = record.split(".")
    if rec.kind == KIND_MODULE:
        return ".".join(tokens[:-1])
    if rec.kind == KIND_API and rec.direction != DIR_NONE and rec.index is not None:
        return ".".join(tokens[:-2] + tokens[-1:])
    if rec.kind == KIND_PARAM_GRAD and rec.index is not None:
        return ".".join(tokens[:-1])
    return record


def fuzzy_key(row_name: str, record: str) -> str:
    """Row-level fuzzy key: ``Functional.conv2d.0.forward.input.0`` -> ``Functional.conv2d.forward.input.0``."""
    slot = row_name[len(record) + 1:] if row_name.startswith(record + ".") else row_name
    return fuzzy_record_key(record) + "." + slot


def _trim(a: Sequence[int], b: Sequence[int]) -> Tuple[int, int]:
    n, m = len(a), len(b)
    lo = 0
    top = min(n, m)
    while lo < top and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < top - lo and a[n - 1 - hi] == b[m - 1 - hi]:
        hi += 1
    return lo, hi


def myers_pairs(a: Sequence[int], b: Sequence[int], max_d: int = 2000) -> Optional[List[Pair]]:
    """Index pairs of a longest common subsequence of ``a`` and ``b`` (Myers), or None if more than ``max_d``
    edits are needed."""
    lo, hi = _trim(a, b)
    pairs: List[Pair] = [(i, i) for i in range(lo)]
    a_mid = a[lo:len(a) - hi]
    b_mid = b[lo:len(b) - hi]
    mid = _myers_core(a_mid, b_mid, max_d)
    if mid is None:
        return None
    pairs.extend((i + lo, j + lo) for i, j in mid)
    n, m = len(a), len(b)
    pairs.extend((n - hi + k, m - hi + k) for k in range(hi))
    return pairs


def _myers_core(a: Sequence[int], b: Sequence[int], max_d: int,
                budget: int = 30_000_000) -> Optional[List[Pair]]:
    """Myers' greedy forward search; gives up (None) beyond ``max_d`` edits or ``budget`` snake steps."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return []
    limit = min(n + m, max_d)
    steps = 0
    off = limit + 1
    v = [0] * (2 * limit + 3)
    trace: List[List[int]] = []
    for d in range(limit + 1):
        trace.append(v[off - d - 1:off + d + 2])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]):
                x = v[off + k + 1]
            else:
                x = v[off + k - 1] + 1
            y = x - k
            x0 = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            steps += x - x0 + 1
            v[off + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, a, b, d)
        if steps > budget:
            return None
    return None


def _backtrack(trace: List[List[int]], a: Sequence[int], b: Sequence[int], d_end: int) -> List[Pair]:
    """Walk the saved V arrays back from (n, m); ``trace[d][k + d + 1]`` is V[k] before round d."""
    x, y = len(a), len(b)
    pairs: List[Pair] = []
    for d in range(d_end, 0, -1):
        tr = trace[d]
        k = x - y
        down = k == -d or (k != d and tr[k - 1 + d + 1] < tr[k + 1 + d + 1])
        prev_k = k + 1 if down else k - 1
        prev_x = tr[prev_k + d + 1]
        start_x = prev_x if down else prev_x + 1
        while x > start_x:
            x -= 1
            y -= 1
            pairs.append((x, y))
        x, y = prev_x, prev_x - prev_k
    while x > 0 and y > 0:
        x -= 1
        y -= 1
        pairs.append((x, y))
    pairs.reverse()
    return pairs


def windowed_pairs(a: Sequence[int], b: Sequence[int], window: int = 64) -> List[Pair]:
    """In-order greedy pairing with bounded look-ahead: the fallback for very different sequences."""
    pairs: List[Pair] = []
    i = j = 0
    n, m = len(a), len(b)
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        jb = next((q for q in range(j + 1, min(m, j + window)) if b[q] == a[i]), None)
        ia = next((p for p in range(i + 1, min(n, i + window)) if a[p] == b[j]), None)
        if jb is not None and (ia is None or jb - j <= ia - i):
            j = jb
        elif ia is not None:
            i = ia
        else:
            i += 1
            j += 1
    return pairs


def align(a: Sequence[int], b: Sequence[int], max_d: int = 2000) -> List[Pair]:
    pairs = myers_pairs(a, b, max_d)
    return pairs if pairs is not None else windowed_pairs(a, b)


def _ids(keys: Sequence[_K], table: Dict[_K, int]) -> List[int]:
    return [table.setdefault(k, len(table)) for k in keys]


def align_records(t_sigs: Sequence[Tuple[str, tuple]], g_sigs: Sequence[Tuple[str, tuple]],
                  max_d: int = 2000) -> List[Pair]:
    """Pair records given (fuzzy name, row signature) per record, in dump order. Two passes (see module doc)."""
    table: Dict[Tuple[str, tuple], int] = {}
    full_t = _ids(t_sigs, table)
    full_g = _ids(g_sigs, table)
    anchors = align(full_t, full_g, max_d)
    names: Dict[str, int] = {}
    name_t = _ids([s[0] for s in t_sigs], names)
    name_g = _ids([s[0] for s in g_sigs], names)
    out: List[Pair] = []
    prev_i = prev_j = -1
    for i, j in anchors + [(len(t_sigs), len(g_sigs))]:
        if i - prev_i > 1 and j - prev_j > 1:
            seg = align(name_t[prev_i + 1:i], name_g[prev_j + 1:j], max_d)
            out.extend((prev_i + 1 + p, prev_j + 1 + q) for p, q in seg)
        if i < len(t_sigs):
            out.append((i, j))
        prev_i, prev_j = i, j
    return out

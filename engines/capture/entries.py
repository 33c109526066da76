"""Tensor entries of one step, framework-neutral: what both adapters' ``TensorEntries`` share.

Each captured tensor version is summarised once as an *entry* (its id indexes the step's entry columns): the
adapter computes the statistics (``StatsBatch``: host rows at once on the CPU, device values moved once a step),
on request its CRC32/xhash, and for the tensor task a private host copy for the store. Here: the per-step state,
the statistics rows turned into columns (``stats_columns``), and the columns of a finished step.
"""

import math
import weakref
from itertools import chain
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines.capture.options import CaptureOptions
from engines.capture.records import VALID_CRC32, VALID_MEAN, VALID_XHASH, EntryColumns
from engines.capture.summary import CaptureSummary

# Positions in a statistics row: max, min, sum, norm, numel, valid bits, nan, +inf and -inf counts.
MAX, MIN, SUM, NORM, NUMEL, VALID, NAN, POSINF, NEGINF = range(9)

StatsColumns = Tuple[np.ndarray, np.ndarray, np.ndarray]  # (stats[n,4] = max,min,mean,norm; valid[n]; counts[n,3])


Volatile = Dict[int, Optional[weakref.ref]]


def mark_volatile(volatile: Volatile, t: Any) -> None:
    """Remember ``t`` as written later by an asynchronous collective, under its id with a weak reference to it."""
    try:
        volatile[id(t)] = weakref.ref(t)
    except TypeError:  # no weak references: known by its id alone
        volatile[id(t)] = None


def is_volatile(volatile: Volatile, key: int, t: Any) -> bool:
    """Whether ``t`` (whose id is ``key``) is a tensor ``mark_volatile`` remembered. A tensor that died frees its
    id for the next one (CPython reuses the memory of a freed object): the new tensor is not volatile, and
    taking it for one would forget what its own history says (an overflow_check entry would lose the
    "uninitialised memory" it was allocated as, and its NaN would be flagged)."""
    if key not in volatile:
        return False
    ref = volatile[key]
    return ref is None or ref() is t


def new_row(numel: int) -> List[Any]:
    """A statistics row with nothing known yet."""
    return [math.nan, math.nan, math.nan, math.nan, numel, 0, 0, 0, 0]


def stats_columns(rows: Dict[int, Sequence[Any]], n_entries: int) -> StatsColumns:
    """Host arrays for entries 0..n-1 from their statistics rows (lists, or tuples when complete at once): (stats[n,4]
    = max,min,mean,norm; valid[n]; counts[n,3]). A NaN anywhere makes max and min NaN (some device kernels skip
    NaN; numpy and torch do not). The rows are left as they are.

    The rows (Python floats, ints and bools) are read into one float64 array and the columns filled by indexed
    assignments: the values ``float()`` gives an entry at a time, and mean = sum / numel the same division, at
    half the cost of a loop of item assignments at every step's end (counts are exact in float64)."""
    ids = [e for e in rows if e < n_entries]
    kept = [rows[e] for e in ids]
    try:  # the values in one pass (~30 % faster than np.array over the nested rows); anything odd: np.array
        if kept and set(map(len, kept)) != {9}:
            raise ValueError("a row of another length")
        arr = np.fromiter(chain.from_iterable(kept), dtype=np.float64, count=9 * len(kept)).reshape(len(kept), 9)
    except (TypeError, ValueError, OverflowError):
        try:
            arr = np.array(kept, dtype=np.float64).reshape(len(kept), 9)
        except (TypeError, ValueError, OverflowError):
            return _stats_columns_loop(rows, n_entries)
    stats = np.full((n_entries, 4), np.nan, dtype=np.float64)
    valid = np.zeros(n_entries, dtype=np.uint8)
    counts = np.full((n_entries, 3), -1, dtype=np.int64)
    if not ids:
        return stats, valid, counts
    at = np.asarray(ids, dtype=np.int64)
    vbits = arr[:, VALID].astype(np.int64)
    valid[at] = vbits
    counts[at] = arr[:, NAN:NEGINF + 1].astype(np.int64)
    has = vbits != 0
    nan_seen = has & (arr[:, NAN] > 0)
    if nan_seen.any():
        arr[nan_seen, MAX] = arr[nan_seen, MIN] = np.nan
    stats[at[has], 0] = arr[has, MAX]
    stats[at[has], 1] = arr[has, MIN]
    mean = has & ((vbits & VALID_MEAN) != 0)
    stats[at[mean], 2] = arr[mean, SUM] / arr[mean, NUMEL]
    stats[at[mean], 3] = arr[mean, NORM]
    return stats, valid, counts


def _stats_columns_loop(rows: Dict[int, Sequence[Any]], n_entries: int) -> StatsColumns:
    """``stats_columns`` an entry at a time (rows holding a value numpy does not take as a float)."""
    stats = np.full((n_entries, 4), np.nan, dtype=np.float64)
    valid = np.zeros(n_entries, dtype=np.uint8)
    counts = np.full((n_entries, 3), -1, dtype=np.int64)
    for entry, row in rows.items():
        if entry >= n_entries:
            continue
        vbits = row[VALID]
        valid[entry] = vbits
        counts[entry] = (row[NAN], row[POSINF], row[NEGINF])
        if not vbits:
            continue
        if row[NAN] and row[NAN] > 0:
            stats[entry, 0] = stats[entry, 1] = math.nan
        else:
            stats[entry, 0] = float(row[MAX])
            stats[entry, 1] = float(row[MIN])
        if vbits & VALID_MEAN:
            stats[entry, 2] = float(row[SUM]) / row[NUMEL]
            stats[entry, 3] = float(row[NORM])
    return stats, valid, counts


class StatsBatchBase:
    """Statistics of one step's tensor entries: rows known on the host at once, and device values waiting for
    one batched move per group (``_pend``); ``finish(n)`` returns the host arrays. The adapter's ``StatsBatch``
    computes the values (``add``) and moves a group (``_host_values``)."""

    def __init__(self, high_precision: bool = False, force_batched: bool = False) -> None:
        self.high = high_precision
        self.force_batched = force_batched
        self.clear()

    def clear(self) -> None:
        # entry -> [max, min, sum, norm, numel, valid, nan, posinf, neginf] (a tuple when complete at once)
        self.host: Dict[int, Any] = {}
        # Device results pending the batched move: group key -> ([0-d tensors], [(entry, column)])
        self.pending: Dict[Any, Tuple[List[Any], List[Tuple[int, int]]]] = {}

    def _pend(self, key: Any, value: Any, entry: int, col: int) -> None:
        group = self.pending.get(key)
        if group is None:
            group = self.pending[key] = ([], [])
        group[0].append(value)
        group[1].append((entry, col))

    def _host_values(self, values: List[Any]) -> List[Any]:
        """One group's values on the host (one transfer)."""
        raise NotImplementedError

    def finish(self, n_entries: int) -> StatsColumns:
        """Host arrays for entries 0..n-1: (stats[n,4] = max,min,mean,norm; valid[n]; counts[n,3])."""
        for values, targets in self.pending.values():
            for (entry, col), v in zip(targets, self._host_values(values)):
                self.host[entry][col] = v
        self.pending = {}
        return stats_columns(self.host, n_entries)


class StepEntries:
    """The per-step state of the adapter's ``TensorEntries`` (``self.stats`` is its ``StatsBatch``)."""

    def __init__(self, options: CaptureOptions, summary: CaptureSummary, stats: Any) -> None:
        self.options = options
        self.summary = summary
        self.want_crc = options.wants_crc32
        self.want_xhash = options.wants_xhash
        self.stats = stats
        self.saving_stopped = False
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.cache: Dict[int, Tuple] = {}
        # tensors an asynchronous collective writes into after its call returns (a recv buffer; by id, checked
        # against a weak reference: ``is_volatile``): the backend's write leaves the version counter alone, so
        # each sight of them this step is summarised anew
        self.volatile: Volatile = {}
        self.stats.clear()
        self.host_data: Dict[int, Tuple[np.ndarray, str]] = {}
        self.hashes: Dict[int, Any] = {}  # entry -> (crc, xhash), or the adapter's pending form of it
        self.numels: Dict[int, int] = {}
        self.meta: List[Tuple[str, str, str]] = []  # entry -> (dtype, shape JSON, device)
        self.dist: Dict[int, str] = {}  # entry -> the dist JSON of a distributed tensor's local shard

    def mark_volatile(self, t: Any) -> None:
        """``t`` changes without a version bump from now on (an async collective's buffer): never reuse its entry."""
        mark_volatile(self.volatile, t)
        self.cache.pop(id(t), None)

    def columns(self) -> EntryColumns:
        """The step's entry columns with statistics and element counts (the adapter adds the hashes)."""
        n = self.n
        cols = EntryColumns(n)
        cols.stats, cols.valid, cols.counts = self.stats.finish(n)
        for e, numel in self.numels.items():
            cols.numel[e] = numel
        cols.dist = self.dist
        return cols

    def take_host_data(self) -> Dict[int, Tuple[np.ndarray, str]]:
        data = self.host_data
        self.host_data = {}
        return data

    def close(self) -> None:
        return None


def put_hashes(cols: EntryColumns, e: int, crc: Any, xhash: Any) -> None:
    if crc is not None:
        cols.crc32[e] = crc
        cols.valid[e] |= VALID_CRC32
    if xhash is not None:
        cols.xhash[e] = xhash
        cols.valid[e] |= VALID_XHASH

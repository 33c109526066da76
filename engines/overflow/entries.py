"""overflow_check's tensor entries, framework-neutral: the facts and references ``engines.overflow.session`` reads.

Each tensor a call touches gets one cheap finiteness test from the adapter (a sum: a NaN or an infinity anywhere
makes it non-finite, a finite sum proves the tensor finite), read at once on the CPU or moved with a batch from a
device (``resolve``). Only a tensor whose sum is not finite gets a closer look (its min and max, and for NaN its
infinities), and only then are its extreme values checked: that cost is paid in overflowing steps alone
(docs/decisions/0017-overflow-and-syncing.md).

The entry keeps a reference to its tensor while a call that uses it is open (the session releases it), and a copy
of the argument an in-place call overwrites (``keep_pre_call``), so a flagged call's inputs can be saved as they
were when it ran. Non-finite tensors are remembered across steps (an optimizer state gone inf at step 3 is still
bad at step 4).

The adapter's ``OverflowEntries`` subclasses ``OverflowEntriesBase`` and brings ``entry``, the test and
``resolve``, ``save`` and ``finish`` (host copies and their statistics), and reading a tensor: ``_nbytes``,
``_clone``, ``_readable`` (a held tensor or its copy as something ``_minmax`` / ``_infinities`` read),
``_float_readable`` and ``_limits``.
"""

import math
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.capture.entries import Volatile, mark_volatile
from engines.capture.summary import CaptureSummary
from engines.overflow import origin as og

# At most this many uninitialised allocations are remembered (model construction makes one per parameter).
MAX_UNINITIALISED = 65536


class OverflowEntriesBase:
    """Drop-in for the capture's ``TensorEntries`` (``entry``, ``meta``, ``finish``, ``take_host_data``, ``clear``,
    ``close``, ``saving_stopped``), with the finiteness facts and references overflow_check needs."""

    def __init__(self, summary: CaptureSummary, batched: bool = False) -> None:
        self.summary = summary
        self.batched = batched
        self.saving_stopped = False
        # id -> (ref, version, kinds, taint): non-finite tensors outlive steps
        self.remembered: Dict[int, Tuple[weakref.ref, int, int, int]] = {}
        # id -> (ref, version): tensors an uninitialising allocation made before recording began (a pipeline
        # stage's shape-inference inputs), still unwritten when first seen: their non-finite values are a mask
        self.uninitialised: Dict[int, Tuple[weakref.ref, int]] = {}
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.cache: Dict[int, Tuple] = {}
        # the tensors an async collective writes later, unseen by the version counter (engines.capture.entries)
        self.volatile: Volatile = {}
        self.meta: List[Tuple[str, str, str]] = []
        self.dist: Dict[int, str] = {}  # entry -> the dist JSON of a distributed tensor's local shard
        self.sums: List[float] = []  # finite test per entry: the sum, or nan while on the device
        self.pending: Dict[Any, Tuple[List[Any], List[int]]] = {}
        self.held: Dict[int, Any] = {}
        self.versions: Dict[int, int] = {}
        self.nbytes: Dict[int, int] = {}
        self.grad: Dict[int, bool] = {}
        self.computed: set = set()  # entries of tensors some autograd-tracked computation made (not leaves)
        self.uninitialised_entries: set = set()  # entries whose non-finite values come from uninitialised memory
        self.clones: Dict[int, Any] = {}
        self.kinds: Dict[int, int] = {}
        self.extremes: Dict[int, int] = {}
        self.taint: Dict[int, int] = {}
        self.host_data: Dict[int, Tuple[np.ndarray, str]] = {}
        self.lost: Dict[int, str] = {}  # entry -> why its data could not be kept
        self.held_bytes = 0
        self.reads = 0  # tensors read on the host beyond the batched sums (each one a sync on an accelerator)
        self.deferred = False  # some sum waited on the device for a batch transfer

    def mark_volatile(self, t: Any) -> None:
        """``t`` changes without a version bump from now on (an irecv's buffer): each sight is a new entry and
        what it held before is forgotten."""
        mark_volatile(self.volatile, t)
        self.cache.pop(id(t), None)
        self.remembered.pop(id(t), None)

    def note_uninitialised(self, t: Any, version: int) -> None:
        """``t`` (at ``version``) holds uninitialised memory: made by ``torch.empty`` or kin before recording."""
        if len(self.uninitialised) >= MAX_UNINITIALISED:
            self.uninitialised = {k: v for k, v in self.uninitialised.items() if v[0]() is not None}
            if len(self.uninitialised) >= MAX_UNINITIALISED:
                return
        try:
            self.uninitialised[id(t)] = (weakref.ref(t), version)
        except TypeError:
            pass

    def _still_uninitialised(self, key: int, t: Any, version: int, e: int) -> None:
        known = self.uninitialised.get(key)
        if known is not None and known[1] == version and known[0]() is t:
            self.taint[e] = og.MASK
            self.uninitialised_entries.add(e)

    # -- what the adapter brings -----------------------------------------------------------------------------
    def entry(self, t: Any, save: bool = False, fresh: bool = False) -> int:
        """The entry of tensor ``t`` (the cached one while its version is unchanged; ``fresh``: always a new one)."""
        raise NotImplementedError

    def resolve(self) -> None:
        """Move the pending finiteness tests to the host (one transfer per device and dtype)."""
        raise NotImplementedError

    def save(self, e: int) -> bool:
        """Host copy of the entry as it was when the call ran; False (and a reason in ``lost``) if impossible."""
        raise NotImplementedError

    def _nbytes(self, t: Any) -> int:
        raise NotImplementedError

    def _clone(self, t: Any) -> Any:
        """A copy of ``t`` as it is now (before an in-place call overwrites it)."""
        raise NotImplementedError

    def _readable(self, e: int) -> Any:
        """The entry's values (its pre-call copy, else the held tensor) in a form ``_minmax`` reads; None when
        released."""
        raise NotImplementedError

    def _float_readable(self, e: int) -> Any:
        """As ``_readable``, but None unless the entry is a non-empty floating tensor."""
        raise NotImplementedError

    def _minmax(self, x: Any) -> Tuple[float, float]:
        raise NotImplementedError

    def _infinities(self, x: Any) -> Tuple[bool, bool]:
        """(any +inf, any -inf)."""
        raise NotImplementedError

    def _limits(self, x: Any) -> Optional[Tuple[float, float]]:
        """(finfo.min, finfo.max) of a floating ``x``'s dtype; None for other dtypes."""
        raise NotImplementedError

    # -- capture ---------------------------------------------------------------------------------------------
    def _hold(self, e: int, t: Any) -> None:
        self.held[e] = t
        n = self.nbytes.get(e)
        if n is None:
            n = self.nbytes[e] = self._nbytes(t)
        self.held_bytes += n

    def _recall(self, key: int, t: Any, version: int, e: int) -> None:
        """A tensor remembered as non-finite from an earlier step keeps its kinds and taint."""
        remembered = self.remembered.get(key)
        if remembered is not None and remembered[1] == version and remembered[0]() is t:
            self.kinds[e] = remembered[2]
            self.taint[e] = remembered[3]

    def release(self, e: int) -> None:
        if self.held.pop(e, None) is not None:
            self.held_bytes -= self.nbytes.get(e, 0)
        if self.clones.pop(e, None) is not None:
            self.held_bytes -= self.nbytes.get(e, 0)

    def keep_pre_call(self, e: int, t: Any, cap_bytes: int) -> bool:
        """Copy ``t`` before an in-place call overwrites it (under the memory cap)."""
        if e in self.clones:
            return True
        n = self.nbytes.get(e)
        if n is None:
            n = self._nbytes(t)
        if self.held_bytes + n > cap_bytes:
            self.lost[e] = "overwritten in place; not copied (memory cap)"
            return False
        self.clones[e] = self._clone(t)
        self.held_bytes += n
        return True

    # -- facts -----------------------------------------------------------------------------------------------
    def nonfinite_hint(self, e: int) -> bool:
        """True when the entry may hold NaN or inf (its sum is not finite)."""
        return not math.isfinite(self.sums[e])

    def approx_kinds(self, e: int) -> int:
        """Kinds read off the sum, with no further work: NaN when it is NaN (NaN, or +inf next to -inf), +inf or
        -inf when it is infinite (that sign, or a sum of finite values past the dtype's range). Exact enough to
        clear most calls (a -inf mask is -inf); a call it flags is judged again with ``kinds_of``."""
        k = self.kinds.get(e)
        if k is not None:
            return k
        return og.kinds_of_value(self.sums[e])

    def kinds_of(self, e: int) -> int:
        """Exact kinds (reads the tensor: a sync on an accelerator)."""
        k = self.kinds.get(e)
        if k is not None:
            return k
        if not self.nonfinite_hint(e):
            self.kinds[e] = 0
            return 0
        x = self._readable(e)
        if x is None:  # released before anyone asked: count it as NaN (the safe reading)
            self.kinds[e] = og.NAN
            return og.NAN
        self.reads += 1
        lo, hi = self._minmax(x)
        k = og.kinds_from_minmax(lo, hi)
        if k & og.NAN:
            pos, neg = self._infinities(x)
            if pos:
                k |= og.POSINF
            if neg:
                k |= og.NEGINF
        elif not k:
            self._set_extremes(e, self._limits(x), lo, hi)
        self.kinds[e] = k
        return k

    def extremes_of(self, e: int) -> int:
        got = self.extremes.get(e)
        if got is not None:
            return got
        x = self._float_readable(e)
        if x is None:
            self.extremes[e] = 0
            return 0
        self.reads += 1
        lo, hi = self._minmax(x)
        self._set_extremes(e, self._limits(x), lo, hi)
        return self.extremes[e]

    def _set_extremes(self, e: int, limits: Optional[Tuple[float, float]], lo: float, hi: float) -> None:
        if limits is None:
            self.extremes[e] = 0
            return
        self.extremes[e] = (og.EXTREME_MAX if hi >= limits[1] else 0) | (og.EXTREME_MIN if lo <= limits[0] else 0)

    def taint_of(self, e: int) -> Optional[int]:
        return self.taint.get(e)

    def set_taint(self, e: int, taint: int) -> None:
        if e in self.taint:
            return
        self.taint[e] = taint
        if taint != og.FINITE:
            t = self.held.get(e)
            version = self.versions.get(e, -1)
            if t is not None and version >= 0:
                try:
                    self.remembered[id(t)] = (weakref.ref(t), version, self.approx_kinds(e), taint)
                except TypeError:
                    pass

    # -- step end --------------------------------------------------------------------------------------------
    def take_host_data(self) -> Dict[int, Tuple[np.ndarray, str]]:
        data = self.host_data
        self.host_data = {}
        return data

    def close(self) -> None:
        self.clear()
        self.remembered = {}
        self.uninitialised = {}

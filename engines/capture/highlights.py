"""What a user looks at first in a finished dump: where non-finite values appear, else the largest magnitudes.

Fed with each step's columns as the sink writes them (the statistics are already on the host then: no device work,
a few numpy passes over the step's rows). A non-finite tensor row (NaN or ±inf in its counts, max or min) is one
of three kinds, decided from its own record:

- **produced**: an output of a call whose tensor inputs are finite and whose scalar arguments are finite: the op
  made the value (the rows a user wants);
- **mask**: an output of a call with a non-finite scalar argument (``masked_fill(mask, -inf)``): filled on purpose,
  not an overflow (docs/decisions/0016-masks-are-not-overflows.md); or an output of an uninitialising allocation
  (``torch.empty`` and kin: FSDP's all-gather buffers, a pipeline stage's receive buffers), whatever memory held;
- **inherited**: an input, or an output of a call that already had a non-finite input.

The summary lists the first produced rows (each name once) when there are any; otherwise the ``keep`` tensors of
largest finite magnitude ``max(|max|, |min|)`` among float tensors that are not constant (a loss, a learning rate,
the optimizer's step counts, a fill), each name once at the step of its largest value. A tensor that
appears in several records of a step (the output of one op is the input of the next) is listed under its first
row: the op that produced it.
"""

import threading
from typing import Any, Dict, List, Mapping, Tuple

import numpy as np

from engines.capture.naming import allocates_uninitialised

VALID_MAX, VALID_MIN = 1, 2
DIRECTION_FORWARD, DIRECTION_BACKWARD = 0, 1  # docs/FORMAT.md records.direction
_FLOAT_DTYPE_WORDS = ("float", "half", "double", "bfloat")
KINDS = ("produced", "mask", "inherited")
Row = Tuple[str, int, str, float, float]  # name, step, values ("nan", "-inf", "nan +inf"...), max, min

Columns = Mapping[str, np.ndarray]  # a table read as one array per column


def _is_float(dtype: str) -> bool:
    low = str(dtype).lower()
    return any(w in low for w in _FLOAT_DTYPE_WORDS) and "complex" not in low


def _cell(value: float) -> Any:
    """A statistic for JSON: non-finite values as text (run.json and event lines stay strict JSON)."""
    return value if np.isfinite(value) else str(value)


def _forward_twin(name: str) -> str:
    """``Functional.x.0.backward`` -> ``Functional.x.0.forward``; ``Module.m.Linear.backward.0`` likewise."""
    head, sep, tail = name.rpartition(".backward")
    return head + ".forward" + tail if sep else name


def _is_input(slot: str) -> bool:
    return slot.startswith("input") or slot.startswith("parameters.")


class TensorHighlights:
    def __init__(self, keep: int = 5) -> None:
        self.keep = keep
        self.nonfinite = {k: 0 for k in KINDS}  # rows of each kind
        self.produced: List[Row] = []
        self._produced_names: set = set()
        self._largest: Dict[str, Tuple[float, int, float, float]] = {}  # name -> (magnitude, step, max, min)
        self._float_cache: Dict[str, bool] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> Dict[str, Any]:  # sent back by the writer process (its lock stays behind)
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def nonfinite_rows(self) -> int:
        return sum(self.nonfinite.values())

    def add_step(self, step: int, records: Dict[str, Any], tensors: Dict[str, Any]) -> None:
        """``records``/``tensors``: one step's columns as ``StepBuffer.build`` makes them (record = local index)."""
        n = len(tensors["slot"])
        if n == 0:
            return
        valid = np.asarray(tensors["valid"])
        mx = np.asarray(tensors["max"], dtype=np.float64)
        mn = np.asarray(tensors["min"], dtype=np.float64)
        has_stats = (valid & (VALID_MAX | VALID_MIN)) == (VALID_MAX | VALID_MIN)
        finite = np.isfinite(mx) & np.isfinite(mn)  # NaN where a statistic is absent: checked with has_stats
        bad = ((np.asarray(tensors["nan_count"]) > 0) | (np.asarray(tensors["posinf_count"]) > 0)
               | (np.asarray(tensors["neginf_count"]) > 0) | (has_stats & ~finite))
        record = np.asarray(tensors["record"])
        with self._lock:
            if bad.any():
                counts = np.stack([np.asarray(tensors[c]) for c in ("nan_count", "posinf_count", "neginf_count")])
                self._classify(step, records, tensors, record, bad, counts, mx, mn)
            self._add_largest(step, records, tensors, record, has_stats & finite, mx, mn)

    def _classify(self, step: int, records: Columns, tensors: Columns, record: np.ndarray, bad: np.ndarray,
                  counts: np.ndarray, mx: np.ndarray, mn: np.ndarray) -> None:
        slots = tensors["slot"]
        names = records["name"]
        args = records["args"]
        direction = records["direction"]
        inputs_bad = set()
        forward_bad = set()  # forward records with a non-finite row: their backward inherits it
        for i in np.flatnonzero(bad).tolist():
            r = int(record[i])
            if _is_input(slots[i]):
                inputs_bad.add(r)
            if direction[r] == DIRECTION_FORWARD:
                forward_bad.add(names[r])
        for i in np.flatnonzero(bad).tolist():
            r = int(record[i])
            if _is_input(slots[i]) or r in inputs_bad or (
                    direction[r] == DIRECTION_BACKWARD and _forward_twin(names[r]) in forward_bad):
                kind = "inherited"
            elif '"type":"float"' in (args[r] or "") or allocates_uninitialised(names[r]):
                kind = "mask"  # a non-finite scalar argument (docs/FORMAT.md args), or uninitialised memory
            else:
                kind = "produced"
            self.nonfinite[kind] += 1
            if kind == "produced" and len(self.produced) < self.keep:
                name = "%s.%s" % (names[r], slots[i])
                if name not in self._produced_names:
                    self._produced_names.add(name)
                    self.produced.append((name, step, _values(counts[:, i], mx[i], mn[i]), float(mx[i]),
                                          float(mn[i])))

    def _add_largest(self, step: int, records: Columns, tensors: Columns, record: np.ndarray, usable: np.ndarray,
                     mx: np.ndarray, mn: np.ndarray) -> None:
        # Constant tensors (single values among them: a loss, a learning rate, the optimizer's step counts) are
        # fills, not what this table is for.
        idx = np.flatnonzero(usable & (mx != mn))
        if idx.shape[0] == 0:
            return
        mag = np.maximum(np.abs(mx[idx]), np.abs(mn[idx]))
        # More candidates than kept: several rows of a step are one tensor, several steps one name, and integer
        # tensors are dropped below (all rows are checked only when too few survive).
        take = min(idx.shape[0], self.keep * 8)
        best = idx[np.argpartition(-mag, take - 1)[:take]] if take < idx.shape[0] else idx
        dtypes = tensors["dtype"]
        best = [i for i in best.tolist() if self._floating(dtypes[i])]
        if len(best) < self.keep and take < idx.shape[0]:
            best = [i for i in idx.tolist() if self._floating(dtypes[i])]
            if len(best) > take:
                sub = np.asarray(best)
                sub_mag = np.maximum(np.abs(mx[sub]), np.abs(mn[sub]))
                best = sub[np.argpartition(-sub_mag, take - 1)[:take]].tolist()
        best.sort()  # dump order: the first row of a tensor is the op that produced it
        mean, norm = tensors["mean"], tensors["norm"]
        names, slots = records["name"], tensors["slot"]
        seen = set()
        for i in best:
            stats = (float(mx[i]), float(mn[i]), float(mean[i]), float(norm[i]))
            if stats in seen:
                continue
            seen.add(stats)
            magnitude = max(abs(stats[0]), abs(stats[1]))
            name = "%s.%s" % (names[int(record[i])], slots[i])
            old = self._largest.get(name)
            if old is None or magnitude > old[0]:
                self._largest[name] = (magnitude, step, stats[0], stats[1])
        if len(self._largest) > self.keep * 4:
            self._largest = dict(sorted(self._largest.items(), key=lambda kv: -kv[1][0])[: self.keep])

    def _floating(self, dtype: str) -> bool:
        known = self._float_cache.get(dtype)
        if known is None:
            known = self._float_cache[dtype] = _is_float(dtype)
        return known

    def largest(self) -> List[Tuple[str, int, float, float]]:
        ranked = sorted(self._largest.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0]))[: self.keep]
        return [(name, step, mx, mn) for name, (_, step, mx, mn) in ranked]

    def describe(self) -> str:
        """One line for the summary grid: ``none``, or the row count by kind."""
        total = self.nonfinite_rows
        if not total:
            return "none"
        parts = ["%d %s" % (self.nonfinite[k], k) for k in KINDS if self.nonfinite[k]]
        return "%d row%s: %s" % (total, "" if total == 1 else "s", ", ".join(parts))

    def tables(self) -> List[Dict[str, Any]]:
        """The summary's ``tables`` entry: the first rows an op produced non-finite, else the largest magnitudes."""
        if self.produced:
            n = self.nonfinite["produced"]
            shown = "%d row%s" % (n, "" if n == 1 else "s") if n == len(self.produced) else \
                "%d of %d rows" % (len(self.produced), n)
            title = "where non-finite values start (%s)" % shown
            return [{"title": title, "columns": ["tensor", "step", "values", "max", "min"],
                     "rows": [[n, s, v, _cell(a), _cell(b)] for n, s, v, a, b in self.produced]}]
        largest = self.largest()
        if not largest:
            return []
        return [{"title": "largest magnitudes", "columns": ["tensor", "step", "max", "min"],
                 "rows": [[n, s, _cell(a), _cell(b)] for n, s, a, b in largest]}]

    def as_dict(self) -> Dict[str, Any]:
        return {"nonfinite_rows": dict(self.nonfinite),
                "produced": [[n, s, v, _cell(a), _cell(b)] for n, s, v, a, b in self.produced],
                "largest": [[n, s, _cell(a), _cell(b)] for n, s, a, b in self.largest()]}


def _values(counts: np.ndarray, mx: float, mn: float) -> str:
    """Which non-finite values a tensor holds, from its counts or, where they were not taken, its max and min."""
    nan, pos, neg = (int(c) for c in counts)
    if nan < 0 and pos < 0 and neg < 0:
        nan = 1 if (np.isnan(mx) or np.isnan(mn)) else 0
        pos = 1 if mx == np.inf else 0
        neg = 1 if mn == -np.inf else 0
    return " ".join(w for w, c in (("nan", nan), ("+inf", pos), ("-inf", neg)) if c > 0) or "?"

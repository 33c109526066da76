"""Record assembly for one step: records, their tensor rows, and the columnar batches written at step end.

A *record* is one captured event (an API call, a module call, a parameter-gradient event, a ``save()``); it owns
tensor *rows* addressed by slot (``input.0``, ``output.0``, ``parameters.weight``...). A row points at a *tensor
entry*: one captured tensor version, whose statistics, hashes and stored data the adapter computes once even when
the same tensor appears in several records (the output of one op is the input of the next).
"""

import json
from itertools import repeat
from typing import Any, Dict, List, Optional

import numpy as np

from engines.capture.naming import FLAG_NONFINITE

# valid bits of the `tensors` table (docs/FORMAT.md).
VALID_MAX = 1 << 0
VALID_MIN = 1 << 1
VALID_MEAN = 1 << 2
VALID_NORM = 1 << 3
VALID_CRC32 = 1 << 4
VALID_XHASH = 1 << 5
VALID_STATS = VALID_MAX | VALID_MIN | VALID_MEAN | VALID_NORM

NO_ENTRY = -1


class EntryColumns:
    """Per tensor entry results, indexed by entry id (filled by the adapter when a step is flushed)."""

    __slots__ = ("stats", "valid", "counts", "crc32", "xhash", "pool", "offset", "numel", "dist")

    def __init__(self, n: int) -> None:
        self.stats = np.full((n, 4), np.nan, dtype=np.float64)  # max, min, mean, norm
        self.valid = np.zeros(n, dtype=np.uint8)
        self.counts = np.full((n, 3), -1, dtype=np.int64)  # nan, +inf, -inf
        self.crc32 = np.full(n, -1, dtype=np.int64)
        self.xhash = np.zeros(n, dtype=np.int64)
        self.pool: List[str] = [""] * n
        self.offset = np.full(n, -1, dtype=np.int64)
        self.numel = np.full(n, -1, dtype=np.int64)
        self.dist: Dict[int, str] = {}  # entry -> a distributed tensor's layout as JSON text (docs/FORMAT.md)


class StepBuffer:
    """Records and tensor rows of the step in progress, in call order."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.rec_name: List[str] = []
        self.rec_kind: List[int] = []
        self.rec_direction: List[int] = []
        self.rec_parent: List[str] = []
        self.rec_stack: List[int] = []
        self.rec_args: List[Any] = []
        self.rec_flags: List[int] = []
        self.row_record: List[int] = []
        self.row_slot: List[str] = []
        self.row_dtype: List[str] = []
        self.row_shape: List[str] = []
        self.row_requires_grad: List[int] = []
        self.row_entry: List[int] = []
        self.row_device: List[str] = []
        self.row_save: List[bool] = []

    @property
    def num_records(self) -> int:
        return len(self.rec_name)

    @property
    def num_rows(self) -> int:
        return len(self.row_slot)

    def add_record(self, name: str, kind: int, direction: int, parent: str = "", stack: int = -1,
                   args: Any = None, flags: int = 0) -> int:
        self.rec_name.append(name)
        self.rec_kind.append(kind)
        self.rec_direction.append(direction)
        self.rec_parent.append(parent)
        self.rec_stack.append(stack)
        self.rec_args.append(args)
        self.rec_flags.append(flags)
        return len(self.rec_name) - 1

    def add_row(self, record: int, slot: str, dtype: str, shape: str, requires_grad: int, entry: int,
                device: str = "", save: bool = False) -> None:
        self.row_device.append(device)
        self.row_save.append(save)
        self.row_record.append(record)
        self.row_slot.append(slot)
        self.row_dtype.append(dtype)
        self.row_shape.append(shape)
        self.row_requires_grad.append(requires_grad)
        self.row_entry.append(entry)

    def truncate(self, n_records: int, n_rows: int) -> None:
        """Drop records and rows added after a mark (a call whose capture failed half way)."""
        for lst in (self.rec_name, self.rec_kind, self.rec_direction, self.rec_parent, self.rec_stack,
                    self.rec_args, self.rec_flags):
            del lst[n_records:]
        for lst in (self.row_record, self.row_slot, self.row_dtype, self.row_shape, self.row_requires_grad,
                    self.row_entry, self.row_device, self.row_save):
            del lst[n_rows:]

    def flag_record(self, record: int, flag: int) -> None:
        self.rec_flags[record] |= flag

    def build(self, step: int, entries: EntryColumns, record_base: int,
              stack_ids: Optional[Dict[int, int]] = None) -> "StepBatch":
        """Columnar batches for the store; ``record_base`` is the number of records already in the file."""
        n_rec = self.num_records
        entry = np.asarray(self.row_entry, dtype=np.int64)
        has = entry >= 0
        safe = np.where(has, entry, 0)
        n_entries = len(entries.valid)
        if n_entries == 0:
            safe = np.zeros_like(entry)
            has = np.zeros(entry.shape, dtype=bool)
            entries = EntryColumns(1)
        stats = np.where(has[:, None], entries.stats[safe], np.nan)
        valid = np.where(has, entries.valid[safe], 0).astype(np.uint8)
        counts = np.where(has[:, None], entries.counts[safe], -1)
        # A tensor is stored once, but only rows of records that asked for it (task tensor, tensor_list) point at it.
        stored = has & np.asarray(self.row_save, dtype=bool)
        if stored.any():
            pools = [entries.pool[i] if h else "" for i, h in zip(safe.tolist(), stored.tolist())]
        else:  # nothing stored (the statistics task): no per-row look-up
            pools = [""] * len(entry)
        record_local = np.asarray(self.row_record, dtype=np.int64)
        flags = np.asarray(self.rec_flags, dtype=np.uint32)
        nonfinite = (counts[:, 0] > 0) | (counts[:, 1] > 0) | (counts[:, 2] > 0)
        if nonfinite.any():
            flags[np.unique(record_local[nonfinite])] |= FLAG_NONFINITE
        stacks = self.rec_stack
        if stack_ids:
            stacks = list(map(stack_ids.get, stacks, repeat(-1)))  # -1 (none) is never a key: it stays -1
        records = {
            "step": np.full(n_rec, step, dtype=np.int64),
            "seq": np.arange(n_rec, dtype=np.int64),
            "name": list(self.rec_name),
            "kind": np.asarray(self.rec_kind, dtype=np.uint8),
            "direction": np.asarray(self.rec_direction, dtype=np.uint8),
            "parent": list(self.rec_parent),
            "stack": np.asarray(stacks, dtype=np.int64),
            "args": self.rec_args if type(self.rec_args) is EncodedArgs else encode_all(self.rec_args),
            "flags": flags,
        }
        tensors = {
            "record": record_local + record_base,
            "step": np.full(len(entry), step, dtype=np.int64),
            "slot": list(self.row_slot),
            "dtype": list(self.row_dtype),
            "shape": list(self.row_shape),
            "device": list(self.row_device),
            "max": stats[:, 0],
            "min": stats[:, 1],
            "mean": stats[:, 2],
            "norm": stats[:, 3],
            "valid": valid,
            "nan_count": counts[:, 0],
            "posinf_count": counts[:, 1],
            "neginf_count": counts[:, 2],
            "requires_grad": np.asarray(self.row_requires_grad, dtype=np.int8),
            "crc32": np.where(has, entries.crc32[safe], -1),
            "xhash": np.where(has, entries.xhash[safe], 0),
            "pool": pools,
            "offset": np.where(stored & (entries.offset[safe] >= 0), entries.offset[safe], -1),
            "numel": np.where(has, entries.numel[safe], -1),
        }
        if entries.dist:  # a column of "" (the default) is left to the store
            dist = entries.dist
            tensors["dist"] = [dist.get(i, "") if h else "" for i, h in zip(safe.tolist(), has.tolist())]
        return StepBatch(step, records, tensors)


class EncodedArgs(list):
    """A step's ``rec_args`` already encoded (``encode_all``): what the training process hands its writer process
    when an argument is a value of a framework's class, which that process does not import."""


class StepBatch:
    """One step's columns, ready for ``DumpWriter.add_records`` / ``add_tensors``."""

    __slots__ = ("step", "records", "tensors")

    def __init__(self, step: int, records: Dict[str, Any], tensors: Dict[str, Any]) -> None:
        self.step = step
        self.records = records
        self.tensors = tensors

    @property
    def num_records(self) -> int:
        return len(self.records["name"])

    @property
    def num_rows(self) -> int:
        return len(self.tensors["slot"])


# One encoder for every record: ``json.dumps`` with options builds a new encoder on each call.
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=True, default=str).encode


def _reused_encoder() -> Any:
    """The C encoder ``_ENCODE`` makes on each call (~0.15 us) and then runs with a circular-reference table
    (~0.3 us more a record), made once and run without the table: the same text (the same C code, the same
    options), a record's arguments in ~0.9 us instead of ~1.7 us. A circular structure, which the table would
    have reported as a ValueError, recurses into a RecursionError instead (both fall back to ``str``). None where
    the C encoder is missing or takes other arguments: ``_ENCODE`` then."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        # markers, default, encoder (ensure_ascii), indent, key_separator, item_separator, sort_keys, skipkeys,
        # allow_nan
        run = make(None, str, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
        probe = {"a": [1, 2.5, float("nan"), None, True, "é"], 3: object}
        if "".join(run(probe, 0)) != _ENCODE(probe):
            return None
    except Exception:  # another Python's C encoder: the public one
        return None
    return run


_C_ENCODE = _reused_encoder()
_join = "".join


def encode_args(args: Any) -> str:
    if args is None:
        return ""
    try:
        if _C_ENCODE is not None:
            return _join(_C_ENCODE(args, 0))
        return _ENCODE(args)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(str(args))


def encode_all(args_list: List[Any]) -> List[str]:
    """``encode_args`` of each record's arguments, the step's list at once: the C encoder and the join mapped
    over it (no Python call a record); the same text, "" for None. A value the encoder refuses sends the whole
    list through ``encode_args`` (its fallback for that value)."""
    if _C_ENCODE is None:
        return [encode_args(a) for a in args_list]
    try:
        out = list(map(_join, map(_C_ENCODE, args_list, repeat(0))))
    except (TypeError, ValueError, RecursionError):
        return [encode_args(a) for a in args_list]
    for i in [i for i, a in enumerate(args_list) if a is None]:
        out[i] = ""
    return out

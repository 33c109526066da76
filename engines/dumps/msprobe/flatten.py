"""Flatten msprobe's dump.json ``data`` into rows (docs/reference/msprobe-analysis.md §1.5), in dump order.

Row names are built from the path in the JSON (``<record>.input.0``, ``.input.<kwarg>``, ``.parameters.<name>``,
``.output.0``, nested ``.0.1`` / ``.key``); list items of a ``parameters_grad`` record get no index. Per record the
order is inputs (args, kwargs), parameters, outputs. msprobe takes a tensor's row name from its ``data_name`` when
it has one; we always use the JSON path (the two agree except for tensors passed as kwargs, which msprobe files
under ``kwargs.<k>`` while its statistics dumps say ``input.<k>``), so tensor and statistics dumps of one run match.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Dict, Optional, Tuple

from engines.dumps.msprobe.backward_slots import (
    TRANSPOSED,
    agrees,
    forward_tensor_inputs,
    map_backward_outputs,
)
from engines.dumps.names import RecordName, parse_record
from engines.dumps.rows import (
    DIR_BACKWARD,
    DIR_FORWARD,
    IO_INPUT,
    IO_OUTPUT,
    IO_PARAM,
    IO_PARAM_GRAD,
    KIND_API,
    KIND_PARAM_GRAD,
    RowBuilder,
    RowTable,
    shape_text,
)
from engines.dumps.scalars import scalar_crc32

MAX_DEPTH = 400
MAX_NUMEL = 1 << 62
_STATS = ("Max", "Min", "Mean", "Norm")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PARTS = (("input_args", "input", IO_INPUT), ("input_kwargs", "input", IO_INPUT), ("input", "input", IO_INPUT),
          ("parameters", "parameters", IO_PARAM), ("output", "output", IO_OUTPUT))
_COMM_KEYS = ("src", "dst", "group_src", "group_dst")


class FieldError(ValueError):
    """A dump.json value of the wrong type. ``leaf`` is the object holding ``field``, so the caller can name its
    place in the file (:func:`json_path`) without the walk paying for paths it never prints."""

    def __init__(self, leaf: Any, field: str, message: str):
        super().__init__(message)
        self.leaf, self.field, self.message = leaf, field, message


def json_path(root: Any, target: Any, prefix: str = "") -> str:
    """Where object ``target`` sits inside ``root``, as ``["name"].key[0]`` ("" when it is not there)."""
    stack = [(root, prefix)]
    while stack:
        obj, path = stack.pop()
        if obj is target:
            return path
        if isinstance(obj, dict):
            stack.extend((v, path + ("." + k if isinstance(k, str) and _IDENT.match(k) else "[" + json.dumps(k) + "]"))
                         for k, v in obj.items() if isinstance(v, (dict, list)))
        elif isinstance(obj, list):
            stack.extend((v, "{}[{}]".format(path, i)) for i, v in enumerate(obj) if isinstance(v, (dict, list)))
    return ""


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:60] + "..."


class Flattener:
    """Turns one dump.json ``data`` dict into a :class:`RowTable`.

    ``parents``: record -> enclosing module (construct.json); ``stacks``: record -> stack text;
    ``file_index``: registers a ``data_name`` and returns its locator; ``framework``: the dump's (its backward
    slots are brought to ours for PyTorch only).
    """

    def __init__(self, *, step: int, rank: int, parents: Dict[str, Optional[str]], stacks: Dict[str, str],
                 file_index: Callable[[str], int], framework: str = "pytorch"):
        self.step = step
        self.rank = rank
        self.parents = parents
        self.stacks = stacks
        self.file_index = file_index
        self.rows = RowBuilder()
        self.order = 0
        self._record = ""
        self._rec: Optional[RecordName] = None
        self._parent = ""
        self._stack = ""
        self._shapes: Dict[tuple, tuple] = {}
        # forward API record -> its entry, kept until its backward maps msprobe's slots
        self._forward_inputs: Dict[str, Any] = {}
        self._transposed = False
        # msprobe's backward slot order is known for its PyTorch hooks (backward_slots.py); MindSpore's stay as read
        self._map_slots = "mindspore" not in framework.lower()

    def flatten(self, data: Dict[str, Any]) -> RowTable:
        """Rows of every record; a value of the wrong type raises ValueError naming its place,
        ``data["Functional.linear.0.forward"].input_args[0].Max: expected a number, got "abc"``."""
        for record, entry in data.items():
            try:
                self.add_record(record, entry)
            except FieldError as exc:
                where = json_path(entry, exc.leaf, "data[{}]".format(json.dumps(record)))
                raise ValueError("{}.{}: {}".format(where, exc.field, exc.message) if where else
                                 "data[{}]: {}".format(json.dumps(record), exc.message)) from None
        return self.rows.build()

    def add_record(self, record: str, entry: Any) -> None:
        self._record = record
        self._rec = rec = parse_record(record)
        parent = self.parents.get(record)
        if isinstance(parent, list):  # Megatron: [parent, micro_step]
            parent = parent[0] if parent else None
        self._parent = parent or ""
        self._stack = self.stacks.get(record, "")
        if not isinstance(entry, dict):
            raise FieldError(None, "", "expected an object (a record), got {}".format(_shown(entry)))
        if rec.kind == KIND_PARAM_GRAD:
            for key, value in entry.items():
                self._walk(value, key, IO_PARAM_GRAD, 0, index_lists=False)
            return
        mapped = self._backward_slots(record, rec, entry)
        for key, slot, io in _PARTS:
            value = entry.get(key)
            if value is None:
                continue
            if key == "output" and mapped is not None:
                for our_slot, item, transposed in mapped:
                    self._transposed = transposed
                    self._walk(item, our_slot, io, 1)
                self._transposed = False
                continue
            if key == "input_kwargs" and isinstance(value, dict):
                for kw, item in value.items():
                    self._walk(item, slot + "." + kw, io, 1)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    self._walk(item, slot + "." + str(i), io, 1)
            elif isinstance(value, dict) and not isinstance(value.get("type"), str):
                for k, item in value.items():
                    self._walk(item, slot + "." + k, io, 1)
            else:
                self._walk(value, slot, io, 1)

    def _backward_slots(self, record: str, rec: RecordName, entry: Dict[str, Any]) -> Any:
        """msprobe's backward output slots as ours (`engines.dumps.msprobe.backward_slots`); None: unchanged."""
        if rec.kind != KIND_API or not self._map_slots:
            return None
        if rec.direction == DIR_FORWARD:
            self._forward_inputs[record] = entry  # a reference: read only if its backward's slots need mapping
            return None
        outputs = entry.get("output")
        if rec.direction != DIR_BACKWARD or not isinstance(outputs, list) or not record.endswith(".backward"):
            return None
        forward = self._forward_inputs.pop(record[:-len("backward")] + "forward", None)
        if forward is None:
            return None
        api = rec.base.split(".", 1)[-1]
        if agrees(api, outputs, forward):
            return None
        return map_backward_outputs(api, outputs, forward_tensor_inputs(forward))

    def _walk(self, value: Any, slot: str, io: int, depth: int, index_lists: bool = True) -> None:
        if depth > MAX_DEPTH:
            raise ValueError("record {}: nesting deeper than {}".format(self._record, MAX_DEPTH))
        if isinstance(value, list):
            for i, item in enumerate(value):
                self._walk(item, slot + "." + str(i) if index_lists else slot, io, depth + 1, index_lists)
            return
        if isinstance(value, dict) and not isinstance(value.get("type"), str):
            for k, item in value.items():
                self._walk(item, slot + "." + k, io, depth + 1, index_lists)
            return
        if value is None:
            self._add(slot, io, dtype="None", shape="[]", numel=-1, stats=None, text=None, crc="",
                      requires_grad=-1, is_tensor=False, data=-1, data_name="")
        elif isinstance(value, dict) and "value" not in value and "shape" in value:
            self._add_tensor(slot, io, value)
        else:
            self._add_scalar(slot, io, value)

    def _add_tensor(self, slot: str, io: int, leaf: Dict[str, Any]) -> None:
        raw_shape = leaf.get("shape")
        if raw_shape is None:
            raw_shape = []
        shape = self._shapes.get(tuple(raw_shape)) if isinstance(raw_shape, list) and all(
            type(d) is int for d in raw_shape) else None
        if shape is None:
            shape_key = _checked_shape(leaf, raw_shape)
            numel = 1
            for dim in shape_key:
                numel *= dim
            if numel >= MAX_NUMEL:
                raise FieldError(leaf, "shape", "{} elements is more than any tensor holds".format(numel))
            shape = self._shapes[shape_key] = (shape_text(shape_key), numel)
        stats = tuple(_checked_stat(leaf, key) for key in _STATS)
        rg = leaf.get("requires_grad")
        data_name = leaf.get("data_name") or ""
        if data_name in ("-1", -1):
            data_name = ""
        elif not isinstance(data_name, str):
            raise FieldError(leaf, "data_name", "expected a file name, got {}".format(_shown(data_name)))
        md5 = leaf.get("md5")
        dtype = leaf.get("dtype", "")
        if not isinstance(dtype, str) or (md5 is not None and not isinstance(md5, str)):
            field = "dtype" if not isinstance(dtype, str) else "md5"
            raise FieldError(leaf, field, "expected a string, got {}".format(_shown(leaf.get(field))))
        crc = str(md5) if md5 is not None else ""
        located = data_name
        if self._transposed and len(shape_key_of(raw_shape)) == 2:
            # msprobe's linear backward holds dwᵀ: shown as w's shape, read back transposed; its checksum hashes
            # other bytes than ours, so it is left out (not comparable)
            shape = (shape_text(tuple(reversed(shape_key_of(raw_shape)))), shape[1])
            crc = ""
            located = data_name + TRANSPOSED if data_name else ""
        self._add(slot, io, dtype=dtype, shape=shape[0], numel=shape[1], stats=stats,
                  text=None, crc=crc,
                  requires_grad=-1 if rg is None else int(rg in (True, "True")), is_tensor=True,
                  data=self.file_index(located) if located else -1, data_name=data_name)

    def _add_scalar(self, slot: str, io: int, leaf: Any) -> None:
        if isinstance(leaf, dict):
            kind = leaf.get("type")
            value = leaf.get("value", leaf.get("format"))
        else:  # a bare value inside a structure (P2POp fields)
            kind, value = None, leaf
        last = slot.rsplit(".", 1)[-1]
        if kind == "torch.Size":
            self._add_text_row(slot, io, "torch.Size", str(value), None, scalar_crc32(value))
        elif kind == "slice":
            self._add_text_row(slot, io, "slice", str((len(value),) if isinstance(value, list) else ()), str(value),
                               scalar_crc32(value))
        elif kind == "ellipsis":
            self._add_text_row(slot, io, "ellipsis", "[]", "...", scalar_crc32(value))
        elif kind == "torch.ProcessGroup":
            ranks = str(leaf.get("group_ranks"))
            self._add_text_row(slot, io, kind, "[]", ranks, ranks)
        elif last in _COMM_KEYS and kind is not None:
            self._add_text_row(slot, io, kind, "[]", str(value), str(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            v = float(value)
            self._add(slot, io, dtype=str(type(value)), shape="[]", numel=-1, stats=(v, v, v, v), text=None,
                      crc=scalar_crc32(value), requires_grad=-1, is_tensor=False, data=-1, data_name="")
        else:  # a framework type keeps its name (``torch.dtype``), as our reader does; builtins their class
            dtype = kind if isinstance(kind, str) and "." in kind else str(type(value))
            self._add_text_row(slot, io, dtype, "[]", str(value), scalar_crc32(value))

    def _add_text_row(self, slot: str, io: int, dtype: str, shape: str, text: Optional[str], crc: str) -> None:
        self._add(slot, io, dtype=dtype, shape=shape, numel=-1, stats=None, text=text, crc=crc,
                  requires_grad=-1, is_tensor=False, data=-1, data_name="")

    def _add(self, slot: str, io: int, *, dtype: str, shape: str, numel: int, stats: Optional[Tuple[Any, ...]],
             text: Optional[str], crc: str, requires_grad: int, is_tensor: bool, data: int, data_name: str) -> None:
        nan = math.nan
        mx = mn = mean = norm = nan
        valid = 0
        nonfinite = -1
        if stats is not None:
            vals = []
            for bit, v in zip((1, 2, 4, 8), stats):
                if v is True or v is False:
                    v = float(v)
                if isinstance(v, (int, float)):
                    v = float(v)
                    valid |= bit
                else:
                    v = nan
                vals.append(v)
            mx, mn, mean, norm = vals
            if valid:  # msprobe dumps have no NaN/inf counts: 1 when a statistic is non-finite
                nonfinite = int(any(not math.isfinite(v) for v, bit in zip(vals, (1, 2, 4, 8)) if valid & bit))
        rec = self._rec
        assert rec is not None, "add_record sets the record first"
        record = self._record
        self.rows.append((record + "." + slot, record, slot, io, rec.kind, rec.direction, dtype, shape, numel,
                          mx, mn, mean, norm, valid, text, requires_grad, crc, nonfinite, is_tensor, self.step,
                          self.rank, self.order, self._parent, self._stack, data, data_name))
        self.order += 1


def shape_key_of(raw: Any) -> tuple:
    return tuple(raw) if isinstance(raw, list) else ()


def _checked_shape(leaf: Dict[str, Any], raw: Any) -> tuple:
    if isinstance(raw, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in raw):
        return tuple(raw)
    raise FieldError(leaf, "shape", "expected a list of non-negative integers, got {}".format(_shown(raw)))


def _checked_stat(leaf: Dict[str, Any], key: str) -> Any:
    """A statistic as msprobe writes it: a number, a bool (bool tensors), null, or a number in text (``"inf"``)."""
    value = leaf.get(key)
    if value is None or isinstance(value, (bool, float)):
        return value
    try:
        if isinstance(value, int):
            float(value)
            return value
        if isinstance(value, str):
            return float(value)
    except (OverflowError, ValueError):
        pass
    raise FieldError(leaf, key, "expected a number, got {}".format(_shown(value)))

"""Flatten msprobe's dump.json ``data`` into rows (reference §1.5), in dump order.

Row names are built from the path in the JSON (``<record>.input.0``, ``.input.<kwarg>``, ``.parameters.<name>``,
``.output.0``, nested ``.0.1`` / ``.key``); list items of a ``parameters_grad`` record get no index. Per record the
order is inputs (args, kwargs), parameters, outputs. msprobe takes a tensor's row name from its ``data_name`` when
it has one; we always use the JSON path (the two agree except for tensors passed as kwargs, which msprobe files
under ``kwargs.<k>`` while its statistics dumps say ``input.<k>``), so tensor and statistics dumps of one run match.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Callable, Dict, Optional

from engines.parse.names import parse_record
from engines.parse.rows import (
    IO_INPUT,
    IO_OUTPUT,
    IO_PARAM,
    IO_PARAM_GRAD,
    KIND_PARAM_GRAD,
    RowBuilder,
    RowTable,
    shape_text,
)

MAX_DEPTH = 400
_PARTS = (("input_args", "input", IO_INPUT), ("input_kwargs", "input", IO_INPUT), ("input", "input", IO_INPUT),
          ("parameters", "parameters", IO_PARAM), ("output", "output", IO_OUTPUT))
_COMM_KEYS = ("src", "dst", "group_src", "group_dst")


def scalar_crc32(value: Any) -> str:
    """msprobe's "md5" of a scalar argument: CRC-32 of ``str(value)`` as 8 hex digits."""
    return "{:08x}".format(zlib.crc32(str(value).encode()))


class Flattener:
    """Turns one dump.json ``data`` dict into a :class:`RowTable`.

    ``parents``: record -> enclosing module (construct.json); ``stacks``: record -> stack text;
    ``file_index``: registers a ``data_name`` and returns its locator.
    """

    def __init__(self, *, step: int, rank: int, parents: Dict[str, Optional[str]], stacks: Dict[str, str],
                 file_index: Callable[[str], int]):
        self.step = step
        self.rank = rank
        self.parents = parents
        self.stacks = stacks
        self.file_index = file_index
        self.rows = RowBuilder()
        self.order = 0
        self._record = ""
        self._rec = None
        self._parent = ""
        self._stack = ""
        self._shapes: Dict[tuple, tuple] = {}

    def flatten(self, data: Dict[str, Any]) -> RowTable:
        for record, entry in data.items():
            self.add_record(record, entry)
        return self.rows.build()

    def add_record(self, record: str, entry: Any) -> None:
        self._record = record
        self._rec = parse_record(record)
        parent = self.parents.get(record)
        if isinstance(parent, list):  # Megatron: [parent, micro_step]
            parent = parent[0] if parent else None
        self._parent = parent or ""
        self._stack = self.stacks.get(record, "")
        if not isinstance(entry, dict):
            return
        if self._rec.kind == KIND_PARAM_GRAD:
            for key, value in entry.items():
                self._walk(value, key, IO_PARAM_GRAD, 0, index_lists=False)
            return
        for key, slot, io in _PARTS:
            value = entry.get(key)
            if value is None:
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
        shape_key = tuple(leaf.get("shape") or ())
        shape = self._shapes.get(shape_key)
        if shape is None:
            numel = 1
            for dim in shape_key:
                numel *= int(dim)
            shape = self._shapes[shape_key] = (shape_text(shape_key), numel)
        stats = (leaf.get("Max"), leaf.get("Min"), leaf.get("Mean"), leaf.get("Norm"))
        rg = leaf.get("requires_grad")
        data_name = leaf.get("data_name") or ""
        if data_name in ("-1", -1):
            data_name = ""
        md5 = leaf.get("md5")
        self._add(slot, io, dtype=str(leaf.get("dtype", "")), shape=shape[0], numel=shape[1], stats=stats,
                  text=None, crc=str(md5) if md5 is not None else "",
                  requires_grad=-1 if rg is None else int(rg in (True, "True")), is_tensor=True,
                  data=self.file_index(data_name) if data_name else -1, data_name=data_name)

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
            self._add_text_row(slot, io, "slice", str((len(value),) if isinstance(value, list) else ()), None,
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
        else:
            self._add_text_row(slot, io, str(type(value)), "[]", str(value), scalar_crc32(value))

    def _add_text_row(self, slot, io, dtype, shape, text, crc) -> None:
        self._add(slot, io, dtype=dtype, shape=shape, numel=-1, stats=None, text=text, crc=crc,
                  requires_grad=-1, is_tensor=False, data=-1, data_name="")

    def _add(self, slot, io, *, dtype, shape, numel, stats, text, crc, requires_grad, is_tensor, data,
             data_name) -> None:
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
        record = self._record
        self.rows.append((record + "." + slot, record, slot, io, rec.kind, rec.direction, dtype, shape, numel,
                          mx, mn, mean, norm, valid, text, requires_grad, crc, nonfinite, is_tensor, self.step,
                          self.rank, self.order, self._parent, self._stack, data, data_name))
        self.order += 1

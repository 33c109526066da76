"""msprobe-style record names, taken apart.

API: ``{Prefix}.{api}.{N}.{forward|backward}`` (``Functional.conv2d.1.backward``).
Module: ``{Module|Cell}.{path}.{Class}.{forward|backward}.{N}``.
Parameter gradients: ``{Module|Cell}.{path}.{Class}.parameters_grad[.{K}]``.
Debug saves: ``{name}.{N}.debug``.
"""

from __future__ import annotations

from typing import Optional

from engines.dumps.rows import (
    DIR_BACKWARD,
    DIR_FORWARD,
    DIR_NONE,
    KIND_API,
    KIND_MODULE,
    KIND_PARAM_GRAD,
    KIND_SAVE,
)

MODULE_PREFIXES = ("Module", "Cell")


class RecordName:
    """A record name taken apart. A plain class rather than a NamedTuple: a tuple's ``index`` method and the
    ``index`` field would clash."""

    __slots__ = ("kind", "direction", "base", "index", "module_path")

    def __init__(self, kind: int, direction: int, base: str, index: Optional[int], module_path: str) -> None:
        self.kind = kind
        self.direction = direction
        self.base = base  # API: "Functional.conv2d"; module: "Module.l1.Linear"
        self.index = index  # call index (None when absent)
        self.module_path = module_path  # module path without prefix and class ("l1"), "" for APIs

    def __repr__(self) -> str:
        return "RecordName(kind={}, direction={}, base={!r}, index={}, module_path={!r})".format(
            self.kind, self.direction, self.base, self.index, self.module_path)


def _int(token: str) -> Optional[int]:
    return int(token) if token.isdigit() else None


def parse_record(name: str) -> RecordName:
    """Kind, direction, base name and call index of a record name (never raises)."""
    tokens = name.split(".")
    if "parameters_grad" in tokens[-2:]:
        pos = len(tokens) - 1 - tokens[::-1].index("parameters_grad")
        base = ".".join(tokens[:pos])
        idx = _int(tokens[pos + 1]) if pos + 1 < len(tokens) else None
        return RecordName(KIND_PARAM_GRAD, DIR_BACKWARD, base, idx, ".".join(tokens[1:pos - 1]))
    if tokens[-1] == "debug" and len(tokens) >= 3:
        return RecordName(KIND_SAVE, DIR_NONE, ".".join(tokens[:-2]), _int(tokens[-2]), "")
    if tokens[0] in MODULE_PREFIXES and len(tokens) >= 4 and tokens[-2] in ("forward", "backward"):
        direction = DIR_FORWARD if tokens[-2] == "forward" else DIR_BACKWARD
        return RecordName(KIND_MODULE, direction, ".".join(tokens[:-2]), _int(tokens[-1]),
                          ".".join(tokens[1:-3]))
    if tokens[-1] in ("forward", "backward") and len(tokens) >= 3:
        direction = DIR_FORWARD if tokens[-1] == "forward" else DIR_BACKWARD
        return RecordName(KIND_API, direction, ".".join(tokens[:-2]), _int(tokens[-2]), "")
    return RecordName(KIND_API, DIR_NONE, name, None, "")


def with_index(name: str, index: int) -> str:
    """The same record name with another call index."""
    tokens = name.split(".")
    rec = parse_record(name)
    if rec.kind == KIND_MODULE:
        tokens[-1] = str(index)
    elif rec.kind == KIND_API and rec.direction != DIR_NONE:
        tokens[-2] = str(index)
    elif rec.kind == KIND_PARAM_GRAD and rec.index is not None:
        tokens[-1] = str(index)
    return ".".join(tokens)


def direction_word(direction: int) -> str:
    return ("forward", "backward", "none")[direction]


def split_row_name(row_name: str, record: str) -> str:
    """The slot part of a row name (``input.0``) given its record name."""
    if row_name.startswith(record + "."):
        return row_name[len(record) + 1:]
    return row_name

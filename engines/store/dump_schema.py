"""The dump schema (kind ``dump``): its tables and the codes its columns use (docs/FORMAT.md, "Dump tables")."""

from enum import IntEnum, IntFlag

from .spec import JSON, STR, Column, TableSpec

DUMP_KIND = "dump"
DUMP_SCHEMA_VERSION = 1


class RecordKind(IntEnum):
    API = 0
    MODULE = 1
    PARAMETERS_GRAD = 2
    SAVE = 3


class Direction(IntEnum):
    FORWARD = 0
    BACKWARD = 1
    NONE = 2


class RecordFlag(IntFlag):
    RECOMPUTED = 1  # a forward re-run by activation checkpointing
    NON_FINITE = 2  # some tensor of the record holds NaN or inf
    PARTIAL = 4  # a hook failed: some of the record's tensors are missing


class Valid(IntFlag):
    """Which statistics of a ``tensors`` row were computed."""

    MAX = 1
    MIN = 2
    MEAN = 4
    NORM = 8
    CRC32 = 16
    XHASH = 32


RECORDS = TableSpec("records", (
    Column("step", "int64"),
    Column("seq", "int64"),
    Column("name", STR),
    Column("kind", "uint8", default=int(RecordKind.API)),
    Column("direction", "uint8", default=int(Direction.NONE)),
    Column("parent", STR, default=""),
    Column("stack", "int64", default=-1),
    Column("args", JSON, default="{}"),
    Column("flags", "uint32", default=0),
))

TENSORS = TableSpec("tensors", (
    Column("record", "int64"),
    Column("step", "int64"),
    Column("slot", STR),
    Column("dtype", STR),
    Column("shape", STR),
    Column("device", STR, default=""),
    Column("max", "float64", default="nan"),
    Column("min", "float64", default="nan"),
    Column("mean", "float64", default="nan"),
    Column("norm", "float64", default="nan"),
    Column("valid", "uint8", default=0),
    Column("nan_count", "int64", default=-1),
    Column("posinf_count", "int64", default=-1),
    Column("neginf_count", "int64", default=-1),
    Column("requires_grad", "int8", default=-1),
    Column("crc32", "int64", default=-1),
    Column("xhash", "int64", default=0),
    Column("pool", STR, default=""),
    Column("offset", "int64", default=-1),
    Column("numel", "int64", default=-1),
    Column("dist", STR, default=""),  # JSON text: a shard's placement and global shape ("" for a plain tensor)
))

STACKS = TableSpec("stacks", (Column("frames", JSON),))

MODULES = TableSpec("modules", (
    Column("name", STR),
    Column("cls", STR),
    Column("parent", STR, default=""),
))

DUMP_TABLES = (RECORDS, TENSORS, STACKS, MODULES)

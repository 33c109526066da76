"""The grad_probe store (kind ``grads``) on the generic table layer (docs/FORMAT.md, "grad_probe tables").

One row per parameter per recorded step in table ``grads``; the packed direction bits of a step go into the
``uint8`` pool in one piece, each parameter's bits at ``dir_offset`` (a global element offset in that pool,
``ceil(numel / 8)`` bytes, ``numpy.packbits`` bit order). The level, bounds and parameter filter are in the
store's run metadata.
"""

from typing import List, Sequence

from engines.grad_probe.levels import has_histogram

KIND = "grads"
TABLE = "grads"
SCHEMA_VERSION = 1


def table_specs(level: str, bounds: Sequence[float]) -> List:
    from engines.store import Column, TableSpec

    columns = [
        Column("step", "int64"),
        Column("name", "str"),
        Column("dtype", "str"),
        Column("shape", "str"),
        Column("numel", "int64"),
        Column("max", "float64"),
        Column("min", "float64"),
        Column("norm", "float64"),
        Column("crc32", "int64", default=-1),
        Column("dir_offset", "int64", default=-1),
        Column("zero_frac", "float64", default="nan"),
    ]
    if has_histogram(level):
        columns.append(Column("hist", "float64", width=len(bounds) + 1))
    return [TableSpec(TABLE, tuple(columns))]

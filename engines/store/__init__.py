"""The HDF5 store: append-only columnar tables, typed tensor pools, commits per step (spec: docs/FORMAT.md).

Generic layer: ``StoreWriter``/``StoreReader`` with ``TableSpec``/``Column``. Dump schema: ``DumpWriter``/
``DumpReader``. numpy and h5py only; no framework is imported here.
"""

from .dtypes import as_float32, bfloat16_bits, is_bfloat16, to_float
from .dump_reader import DumpReader
from .dump_schema import DUMP_KIND, DUMP_SCHEMA_VERSION, DUMP_TABLES, Direction, RecordFlag, RecordKind, Valid
from .dump_writer import DumpWriter
from .errors import StoreError, StoreWarning
from .fs import MODE_ENV, PER_STEP, SWMR, filesystem_type, resolve_mode
from .reader import StoreReader
from .rundirs import open_rank_dirs, store_kinds
from .spec import FORMAT_VERSION, POOL_DTYPES, Column, TableSpec, TensorRef
from .writer import StoreWriter

__all__ = [
    "DUMP_KIND", "DUMP_SCHEMA_VERSION", "DUMP_TABLES", "FORMAT_VERSION", "MODE_ENV", "PER_STEP", "POOL_DTYPES",
    "SWMR", "Column", "Direction", "DumpReader", "DumpWriter", "RecordFlag", "RecordKind", "StoreError",
    "StoreReader", "StoreWarning", "StoreWriter", "TableSpec", "TensorRef", "Valid", "as_float32",
    "bfloat16_bits", "filesystem_type", "is_bfloat16", "open_rank_dirs", "resolve_mode", "store_kinds",
    "to_float",
]

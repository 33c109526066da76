"""The HDF5 store: append-only columnar tables, typed tensor pools, commits per step (spec: docs/FORMAT.md).

Generic layer: ``StoreWriter``/``StoreReader`` with ``TableSpec``/``Column``. Dump schema: ``DumpWriter``/
``DumpReader``. numpy and h5py only; no framework is imported here.
"""

from .dtypes import as_float32, bfloat16_bits, is_bfloat16, to_float
from .errors import StoreError, StoreWarning
from .fs import MODE_ENV, PER_STEP, SWMR, filesystem_type, resolve_mode
from .reader import StoreReader
from .spec import FORMAT_VERSION, POOL_DTYPES, Column, TableSpec, TensorRef
from .writer import StoreWriter

__all__ = [
    "FORMAT_VERSION", "MODE_ENV", "PER_STEP", "POOL_DTYPES", "SWMR",
    "Column", "StoreError", "StoreReader", "StoreWarning", "StoreWriter", "TableSpec", "TensorRef",
    "as_float32", "bfloat16_bits", "filesystem_type", "is_bfloat16", "resolve_mode", "to_float",
]

"""Raw bytes of MindSpore tensors: private host copies for the tensor task, CRC32 and xhash.

xhash is defined in ``engines.capture.xhash`` (numpy reference); equal values give equal hashes in a PyTorch and
a MindSpore dump. The host copy is the tensor's logical bytes: bfloat16 is kept as its uint16 bit pattern with
the logical dtype name beside it (docs/FORMAT.md), so nothing is widened on disk.
"""

from typing import Optional, Tuple

import numpy as np
from mindspore import Tensor

from engines.capture import xhash as xh
from engines.native.crc32 import crc32


def host_copy(t: Tensor) -> Tuple[np.ndarray, str]:
    """A private contiguous host copy (bfloat16 as uint16 bits) and the tensor's dtype name (``Float32``...).

    ``asnumpy`` of a CPU tensor is a view of its memory, which a later in-place op may overwrite: this copies.
    """
    arr = t.asnumpy()
    if arr.dtype.name == "bfloat16":
        arr = arr.view(np.uint16)
    return np.array(arr, copy=True, order="C"), str(t.dtype)


def crc32_of(arr: np.ndarray) -> int:
    return crc32(np.ascontiguousarray(arr))  # zlib.crc32's value, by the native kernel where it is available


def xhash_of(arr: np.ndarray, dtype_name: str, shape: Tuple[int, ...]) -> int:
    raw = arr.view(np.uint8) if arr.dtype == np.bool_ else arr
    return xh.xhash_bytes(raw, dtype_name, shape)


def hashes(arr: np.ndarray, dtype_name: str, shape: Tuple[int, ...], crc: bool,
           xhash: bool) -> Tuple[Optional[int], Optional[int]]:
    return (crc32_of(arr) if crc else None), (xhash_of(arr, dtype_name, shape) if xhash else None)

"""xhash: a content hash that is equal across frameworks for equal values (reference implementation, numpy).

Definition (version 1; docs/FORMAT.md repeats it):

1. Take the tensor's elements in C order as little-endian raw bytes of its *logical* dtype (bfloat16 keeps its
   2 bytes, bool is one byte 0/1, complex is real then imaginary part). A 0-d tensor has one element.
2. Cut the bytes into words of ``w = min(itemsize, 4)`` bytes: ``u_0 .. u_{m-1}``, unsigned little-endian.
3. With the weight table ``W[i] = fmix64(i + K2) | 1`` for ``i < 2**20`` (odd 64-bit weights) and, for word
   ``j = c * 2**20 + i``, the weight ``w_j = W[i] * (2c + 1)``, all modulo 2**64::

       S = sum_j u_j * w_j

4. ``h = fmix64(S XOR (m * K3) XOR fnv1a64("<dtype>|<d0,d1,...>"))`` where ``dtype`` is the framework-neutral
   name (``float32``, ``bfloat16``, ``int64``, ``bool``, ``complex64``...) and the dims are decimal.
   ``fmix64`` is MurmurHash3's 64-bit finaliser. The result is stored as the signed 64-bit integer with the same
   bits.

Step 3 is one integer dot product (``numpy.dot`` on uint64, ``torch.dot`` or ``(u * w).sum()`` on int64 on any
device): products and sums wrap modulo 2**64 identically for signed and unsigned 64-bit integers, so every
framework gets the same bits. The weights are odd, so changing any single word (a one-ulp change, a sign flip)
always changes S; distinct position weights make permutations and reshapes (through the dims) change the hash.
It is a checksum for telling equal tensors from unequal ones, not a cryptographic hash.
"""

from typing import Sequence

import numpy as np

K2 = 0xC2B2AE3D27D4EB4F
K3 = 0x165667B19E3779F9
MASK64 = (1 << 64) - 1
CHUNK_BITS = 20
CHUNK_WORDS = 1 << CHUNK_BITS

_WORD_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}

# Framework dtype spellings -> the neutral names used by the hash and by the readers.
_NEUTRAL_NAMES = {
    "half": "float16", "float": "float32", "double": "float64", "cfloat": "complex64", "cdouble": "complex128",
    "long": "int64", "int": "int32", "short": "int16", "bool_": "bool", "bf16": "bfloat16",
}


def neutral_dtype_name(name: str) -> str:
    """``torch.bfloat16`` / ``Float32`` / ``float32`` -> ``bfloat16`` / ``float32``."""
    base = str(name).rsplit(".", 1)[-1].lower()
    return _NEUTRAL_NAMES.get(base, base)


def fmix64(h: int) -> int:
    h &= MASK64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB2F9A7E73C4D) & MASK64
    h ^= h >> 33
    return h


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


def meta_seed(dtype_name: str, shape: Sequence[int]) -> int:
    text = "%s|%s" % (neutral_dtype_name(dtype_name), ",".join(str(int(d)) for d in shape))
    return fnv1a64(text.encode("ascii"))


def to_signed64(h: int) -> int:
    h &= MASK64
    return h - (1 << 64) if h >= (1 << 63) else h


def fmix64_array(h: np.ndarray) -> np.ndarray:
    h = h.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB2F9A7E73C4D)
        h ^= h >> np.uint64(33)
    return h


_weights = None


def weights() -> np.ndarray:
    """The 2**20 odd 64-bit weights ``W[i] = fmix64(i + K2) | 1`` (uint64, built once)."""
    global _weights
    if _weights is None:
        with np.errstate(over="ignore"):
            base = np.arange(CHUNK_WORDS, dtype=np.uint64) + np.uint64(K2)
        _weights = fmix64_array(base) | np.uint64(1)
    return _weights


def word_sum(words: np.ndarray) -> int:
    """Step 3 over unsigned words (any of uint8/16/32): the wrapped sum S as a Python int."""
    w = weights()
    total = 0
    with np.errstate(over="ignore"):
        for c, start in enumerate(range(0, words.size, CHUNK_WORDS)):
            u = words[start:start + CHUNK_WORDS].astype(np.uint64)
            part = int(np.dot(u, w[:u.size]))
            total = (total + part * (2 * c + 1)) & MASK64
    return total


def finish(word_total: int, num_words: int, dtype_name: str, shape: Sequence[int]) -> int:
    """Step 4: fold in the word count, dtype and shape; returns the signed 64-bit value stored in dumps."""
    h = (word_total ^ ((num_words * K3) & MASK64) ^ meta_seed(dtype_name, shape)) & MASK64
    return to_signed64(fmix64(h))


def words_of(raw: np.ndarray) -> np.ndarray:
    """Reinterpret a contiguous array's bytes as the hash's words (little-endian)."""
    flat = np.ascontiguousarray(raw).reshape(-1)
    itemsize = flat.dtype.itemsize
    width = min(itemsize, 4)
    data = flat.view(np.uint8)
    if width == 1:
        return data
    words = data.view("<u%d" % width)
    return words.astype(_WORD_DTYPES[width], copy=False)


def xhash_bytes(raw: np.ndarray, dtype_name: str, shape: Sequence[int]) -> int:
    """xhash of an array holding the raw element bits (bfloat16 as uint16) with the logical dtype and shape."""
    words = words_of(raw)
    return finish(word_sum(words), int(words.size), dtype_name, shape)


def xhash_array(array: np.ndarray, dtype_name: str = "") -> int:
    """xhash of a numpy array; ``dtype_name`` overrides the logical dtype (``bfloat16`` for uint16 bits)."""
    array = np.asarray(array)
    if array.dtype == np.bool_:
        array = array.view(np.uint8)
    name = dtype_name or np.dtype(array.dtype).name
    return xhash_bytes(array, name, array.shape)


def xhash_hex(value: int) -> str:
    return "%016x" % (value & MASK64)

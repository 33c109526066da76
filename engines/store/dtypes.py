"""Dtypes numpy lacks: bfloat16 is stored as its uint16 bit pattern, with the logical name kept beside it."""

import numpy as np

BFLOAT16_NAMES = frozenset({"bfloat16", "torch.bfloat16", "bf16", "mindspore.bfloat16", "BFloat16"})


def is_bfloat16(dtype_name: str) -> bool:
    return dtype_name in BFLOAT16_NAMES


def as_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) to float32 values, exactly (bf16 is the top half of a float32)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"as_float32 expects uint16 bfloat16 bits, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values to bfloat16 bits, rounding to nearest even (NaN stays NaN)."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def to_float(array: np.ndarray, dtype_name: str) -> np.ndarray:
    """A stored tensor as numbers numpy can compute with: bfloat16 bits become float32, others unchanged."""
    return as_float32(array) if is_bfloat16(dtype_name) else np.asarray(array)

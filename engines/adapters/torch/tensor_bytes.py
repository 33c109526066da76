"""Raw bytes of tensors: host copies for the tensor task and CRC32, and xhash computed on the device.

xhash is defined in ``engines.capture.xhash`` (numpy reference); ``device_word_sum`` is the same arithmetic on
signed int64 torch tensors, so it runs where the tensor lives and only a 0-d result crosses to the host.
"""

from typing import Dict, Tuple

import numpy as np
import torch

from engines.capture import xhash as xh

_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                         "float8_e8m0fnu") if hasattr(torch, n))


_weights_on: dict = {}


def _device_weights(device: torch.device) -> torch.Tensor:
    """xhash's weight table as int64 on ``device`` (same bits as the uint64 numpy table), built once per device."""
    w = _weights_on.get(device)
    if w is None:
        w = torch.from_numpy(xh.weights().view(np.int64).copy()).to(device)
        _weights_on[device] = w
    return w


def raw_view(t: torch.Tensor) -> torch.Tensor:
    """A same-bytes view with a dtype numpy understands (bfloat16 -> int16, float8 -> uint8)."""
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16)
    if t.dtype in _FP8:
        return t.view(torch.uint8)
    if t.dtype is torch.complex32:
        return t.view(torch.int32)
    return t


def host_copy(t: torch.Tensor) -> Tuple[np.ndarray, str]:
    """A private contiguous host copy of ``t`` as numpy (bfloat16 as uint16 bits) and its logical dtype name.

    The copy never shares memory with ``t``: the training loop may overwrite ``t`` in place right after.
    Device tensors are copied with ``non_blocking``; the caller synchronises once before reading (flush).
    """
    x = t.detach()
    if x.is_cpu:
        x = x.clone(memory_format=torch.contiguous_format)
    else:
        x = x.contiguous().to("cpu", non_blocking=True)
    arr = raw_view(x).numpy()
    if x.dtype is torch.bfloat16:
        arr = arr.view(np.uint16)
    return arr, str(t.dtype)


def device_word_sum(t: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """Step 3 of xhash on the tensor's device: (0-d int64 tensor S, number of words m)."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype is torch.bool:
        flat = flat.view(torch.uint8)
    itemsize = flat.element_size()
    if itemsize >= 4:
        words = flat.view(torch.int32)
        mask = 0xFFFFFFFF
    elif itemsize == 2:
        words = flat.view(torch.int16)
        mask = 0xFFFF
    else:
        words = flat.view(torch.uint8)
        mask = 0
    m = words.numel()
    w = _device_weights(words.device)
    total = torch.zeros((), dtype=torch.int64, device=words.device)
    for c, start in enumerate(range(0, m, xh.CHUNK_WORDS)):
        u = words[start:start + xh.CHUNK_WORDS].to(torch.int64)
        if mask:
            u = u & mask
        ws = w[:u.numel()]
        part = torch.dot(u, ws) if u.is_cpu else (u * ws).sum()
        total = total + part * (2 * c + 1)
    return total, m


def device_xhash(t: torch.Tensor) -> int:
    """xhash computed with torch (reads one 0-d value; used by tests and the CPU path of ``xor``)."""
    s, m = device_word_sum(t)
    return xh.finish(int(s.item()) & xh.MASK64, m, str(t.dtype), tuple(t.shape))


def synchronize() -> None:
    """Wait for the current accelerator (non-blocking host copies must land before they are read)."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "synchronize"):
        try:
            if acc.is_available():
                acc.synchronize()
                return
        except Exception:
            pass
    if torch.cuda.is_available():
        torch.cuda.synchronize()


_DTYPE_NAMES: Dict[torch.dtype, str] = {}


def meta_of(t: torch.Tensor) -> Tuple[str, str, str]:
    """(dtype name, shape JSON, device) of a row, as the store writes them."""
    dtype = t.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name, str(list(t.shape)), "cpu" if t.is_cpu else str(t.device)

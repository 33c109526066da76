"""Load (and, for `probe-tui export`, save) a ``.pt`` tensor file safely: ``torch.load(weights_only=True)``, never plain unpickling.

Only msprobe dumps use ``.pt`` files; compare and parse reach this module lazily, so they work without torch
for everything else.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import BinaryIO, Union

import numpy as np


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def load_pt(path: Union[str, Path]) -> np.ndarray:
    """The tensor in ``path`` as a numpy array (bfloat16 and other non-numpy dtypes become float32)."""
    import torch

    path = Path(path)
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds: unpickling refused, truncated zip, ...
        raise ValueError("{}: cannot load tensor ({})".format(path, " ".join(str(exc).split()) or type(exc).__name__)) from None
    if not isinstance(obj, torch.Tensor):
        raise ValueError("{}: holds a {}, not a tensor".format(path, type(obj).__name__))
    tensor = obj.detach().cpu()
    if tensor.is_complex():
        return tensor.contiguous().numpy()
    try:
        return tensor.contiguous().numpy()
    except TypeError:  # bfloat16, float8, ...: no numpy dtype
        return tensor.float().contiguous().numpy()


def save_pt(fh: BinaryIO, array: np.ndarray, dtype_name: str) -> None:
    """``array`` written to the open file ``fh`` as msprobe's PyTorch dumps hold tensors (``torch.save`` of a
    contiguous CPU tensor), cast back to ``dtype_name`` (``torch.bfloat16``: our readers give bfloat16 as
    float32, which holds every bfloat16 value exactly)."""
    import torch

    tensor = torch.from_numpy(np.ascontiguousarray(array))
    target = getattr(torch, dtype_name[len("torch."):], None) if dtype_name.startswith("torch.") else None
    if isinstance(target, torch.dtype) and target != tensor.dtype:
        tensor = tensor.to(target)
    torch.save(tensor.contiguous(), fh)

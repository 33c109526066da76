"""Reproducibility and the facts a run records about its framework: ``seed_all`` and ``describe``."""

import os
from typing import Any, Dict, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

from engines.capture.seeding import remember, seed_python

_seed_state: Dict[str, Any] = {}
_dropout_mode: Optional["DropoutOffMode"] = None


class DropoutOffMode(TorchFunctionMode):
    """Runs every dropout call with ``p = 0`` (``rm_dropout``), modules and functional calls alike."""

    def __init__(self) -> None:
        super().__init__()
        import torch.nn.functional as F

        names = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
        self.targets = {getattr(F, n) for n in names if hasattr(F, n)}
        self.targets |= {getattr(torch, n) for n in ("dropout", "alpha_dropout", "feature_dropout",
                                                     "feature_alpha_dropout") if hasattr(torch, n)}

    def __torch_function__(self, func: Any, types: Tuple[type, ...], args: tuple = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in self.targets:
            if "p" in kwargs:
                kwargs["p"] = 0.0
            elif len(args) > 1:
                args = (args[0], 0.0) + tuple(args[2:])
            else:
                kwargs["p"] = 0.0
        return func(*args, **kwargs)


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> Dict[str, Any]:
    """Seed Python, numpy, torch (and every accelerator); deterministic kernels with ``mode``; dropout off with
    ``rm_dropout``. Returns what was set, which the run metadata records (docs/decisions/0012-in-script-apis.md)."""
    global _dropout_mode
    seed_python(seed, mode)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    npu = getattr(torch, "npu", None)
    if npu is not None and hasattr(npu, "manual_seed_all"):
        try:
            npu.manual_seed_all(seed)
        except Exception:
            pass
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if mode:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    if rm_dropout and _dropout_mode is None:
        _dropout_mode = DropoutOffMode()
        _dropout_mode.__enter__()
    return remember(_seed_state, seed, mode, rm_dropout)


def seed_state() -> Dict[str, Any]:
    return dict(_seed_state)


def describe() -> Dict[str, Any]:
    """Framework and device versions and determinism settings for the run metadata."""
    info: Dict[str, Any] = {
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "num_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "device": "cpu",
    }
    if torch.cuda.is_available():
        info["device"] = "cuda"
        info["device_name"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
    if _seed_state:
        info["seed_all"] = dict(_seed_state)
    return info

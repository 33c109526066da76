"""Reproducibility and the facts a run records about MindSpore: ``seed_all`` and ``describe``."""

import os
import random
from typing import Any, Dict

import mindspore as ms

_seed_state: Dict[str, Any] = {}


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> Dict[str, Any]:
    """Seed Python, numpy and MindSpore; deterministic kernels with ``mode``. Returns what was set, which the run
    metadata records (DECISIONS 12). ``rm_dropout`` is recorded but MindSpore's dropout has no global switch: build
    the model with ``p=0`` (the demo does)."""
    os.environ["PYTHONHASHSEED"] = str(seed)
    os.environ.setdefault("HCCL_DETERMINISTIC", "true" if mode else "false")
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    ms.set_seed(seed)
    if mode:
        try:
            ms.set_deterministic(True)
        except Exception:
            ms.set_context(deterministic="ON")
    _seed_state.clear()
    _seed_state.update({"seed": seed, "deterministic_algorithms": bool(mode), "rm_dropout": bool(rm_dropout)})
    return dict(_seed_state)


def seed_state() -> Dict[str, Any]:
    return dict(_seed_state)


def describe() -> Dict[str, Any]:
    """Framework and device facts for the run metadata."""
    info: Dict[str, Any] = {"framework": "mindspore", "mindspore_version": ms.__version__}
    try:
        info["device"] = str(ms.get_context("device_target")).lower()
        info["mode"] = "pynative" if ms.get_context("mode") == ms.PYNATIVE_MODE else "graph"
    except Exception:
        pass
    if _seed_state:
        info["seed_all"] = dict(_seed_state)
    return info

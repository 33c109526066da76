"""Reproducibility and the facts a run records about MindSpore: ``seed_all`` and ``describe``."""

from typing import Any, Dict

import mindspore as ms

from engines.capture.seeding import remember, seed_python

_seed_state: Dict[str, Any] = {}


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> Dict[str, Any]:
    """Seed Python, numpy and MindSpore; deterministic kernels with ``mode``. Returns what was set, which the run
    metadata records (docs/decisions/0012-in-script-apis.md). ``rm_dropout`` is recorded but MindSpore's dropout has no global switch: build
    the model with ``p=0`` (the demo does)."""
    seed_python(seed, mode)
    ms.set_seed(seed)
    if mode:
        try:
            ms.set_deterministic(True)
        except Exception:
            ms.set_context(deterministic="ON")
    return remember(_seed_state, seed, mode, rm_dropout)


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

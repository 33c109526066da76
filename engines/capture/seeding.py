"""``seed_all``'s framework-neutral part: Python's and numpy's seeds, the hash seed, HCCL's determinism switch, and
the record of what was set (the run metadata keeps it, docs/decisions/0012-in-script-apis.md). The adapters' ``environment.seed_all``
seed their framework and call these."""

import os
import random
from typing import Any, Dict


def seed_python(seed: int, mode: bool) -> None:
    os.environ["PYTHONHASHSEED"] = str(seed)
    os.environ.setdefault("HCCL_DETERMINISTIC", "true" if mode else "false")
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def remember(state: Dict[str, Any], seed: int, mode: bool, rm_dropout: bool) -> Dict[str, Any]:
    """Replace ``state`` by what ``seed_all`` set; returns a copy for the caller."""
    state.clear()
    state.update({"seed": seed, "deterministic_algorithms": bool(mode), "rm_dropout": bool(rm_dropout)})
    return dict(state)

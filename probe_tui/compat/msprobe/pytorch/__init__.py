"""Stand-in for ``msprobe.pytorch``: ``from probe_tui.compat.msprobe.pytorch import PrecisionDebugger, seed_all``.

``PrecisionDebugger`` (``start(model, token_range, rank_id)``, ``stop``, ``step``, ``forward_backward_dump_end``,
``save``, ``set_init_step``, ``register_custom_api``/``restore_custom_api``, ``module_dump``/``module_dump_end``,
``monitor`` for grad_probe), ``module_dump``/``module_dump_end``, ``seed_all`` and ``TrainerMon``, on probe-tui
(docs/MSPROBE.md). Importing it imports no framework.
"""

from typing import Any, Dict

from probe_tui.compat.msprobe_api import TorchPrecisionDebugger as PrecisionDebugger
from probe_tui.compat.msprobe_api import TrainerMon, seed_all_for
from probe_tui.debugger import module_dump, module_dump_end

__all__ = ["PrecisionDebugger", "seed_all", "module_dump", "module_dump_end", "TrainerMon"]


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False,
             is_enhanced: bool = False) -> Dict[str, Any]:
    """msprobe's ``seed_all``: every generator seeded, deterministic kernels with ``mode``, dropout off with
    ``rm_dropout`` (before the dropout modules are built)."""
    return seed_all_for("pytorch", seed, mode, rm_dropout, is_enhanced)

"""Which MindSpore callable a replay may run for a record name: the capture's own API table, inverted, compute only.

As in ``engines.adapters.torch.replay_table``: a dump is input anyone may have written, so a record name is never
resolved with ``getattr`` on a namespace (which reaches classes such as ``ops.Custom``, imported helpers, or
``tensordump``, which writes files). The table L1 wraps (``api_table.namespaces`` / ``module_functions`` /
``tensor_methods``) is inverted once; what it names and what computes is replayable, and nothing else.
"""

import functools
from typing import Any, Callable, Dict, Tuple

import mindspore as ms

from engines.adapters.mindspore import api_table
from engines.capture import naming

# Functions the table names that write files, transform functions, or talk to other processes.
NEVER_REPLAYED = frozenset(("tensordump", "jit_forbidden_register", "kernel", "add_flags", "derivative"))
_NOT_COMPUTE_MODULES = ("mindspore.ops.function.debug_func", "mindspore.ops.function.grad",
                        "mindspore.ops.function.comm_func", "mindspore.ops.function.reshard_func",
                        "mindspore.ops.operations._ms_kernel", "mindspore.ops.composite.base", "mindspore.graph._utils")
_COMPUTE_ROOTS = ("mindspore.", "engines.adapters.mindspore.demo_ops")

class NotReplayable(Exception):
    """The name is well formed but names no compute callable of this MindSpore (the message says why)."""


@functools.lru_cache(maxsize=None)
def _named_callables() -> Dict[Tuple[str, str], Any]:
    """(prefix, api) -> the callable the capture's table names so, built once."""
    inverse: Dict[Tuple[str, str], Any] = {}
    for module, prefix in api_table.namespaces():
        for _attr, original, pfx, api in api_table.module_functions(module, prefix):
            inverse.setdefault((pfx, api), original)
    ranked: Dict[Tuple[str, str], Tuple[int, Any]] = {}
    for attr, original, pfx, api in api_table.tensor_methods():
        rank = _method_rank(attr, api)
        if (pfx, api) not in ranked or rank < ranked[(pfx, api)][0]:
            ranked[(pfx, api)] = (rank, original)
    for key, (_, original) in ranked.items():
        inverse.setdefault(key, original)
    return inverse


def _method_rank(attr: str, api: str) -> int:
    """Which Tensor attribute a record name means when several carry it: the method of that name (``div``), then
    the operator (``__truediv__``), never the reflected operator (``__rtruediv__`` is also named ``div``, but
    computes ``other / self``: replaying ``x / y`` with it gives ``y / x``)."""
    if attr == api:
        return 0
    reflected = attr.startswith("__r") and attr.endswith("__") and hasattr(ms.Tensor, "__" + attr[3:])
    return 2 if reflected else 1


def is_compute(obj: Any, prefix: str, api: str) -> bool:
    if api in NEVER_REPLAYED:
        return False
    if prefix == naming.PREFIX_TENSOR:
        return True
    module = getattr(obj, "__module__", None) or ""
    return module.startswith(_COMPUTE_ROOTS) and not module.startswith(_NOT_COMPUTE_MODULES)


def resolve(prefix: str, api: str) -> Callable:
    """The callable a replay runs for ``prefix.api``; ``NotReplayable`` when there is none."""
    if prefix == api_table.PREFIX_PRIMITIVE:
        raise NotReplayable("primitives are not replayed here (acc_check replays them from their recorded attributes)")
    if prefix in (naming.PREFIX_DISTRIBUTED, api_table.PREFIX_MINT_DISTRIBUTED):
        raise NotReplayable("collectives are not replayed")
    found = _named_callables().get((prefix, api))
    if found is None:
        raise NotReplayable("no %s.%s in this MindSpore's API table (MindSpore %s)" % (prefix, api, ms.__version__))
    if not is_compute(found, prefix, api):
        raise NotReplayable("%s.%s is not a compute op; replay runs compute ops only" % (prefix, api))
    while hasattr(found, "__wrapped__"):
        found = found.__wrapped__
    return found

"""Process-wide optimizer hooks for MindSpore, the counterpart of torch's ``register_optimizer_step_*_hook``.

MindSpore optimizers are cells called with the gradients (``optimizer(grads)``); it has no global hook on
that call. While at least one hook is registered, the ``__call__`` of the optimizer base classes
(``nn.Optimizer`` and ``mindspore.experimental.optim.Optimizer``, the base of ``mint.optim`` too) is replaced by a
wrapper that runs the pre-hooks, the optimizer (through the original ``Cell.__call__``), then the post-hooks;
removing the last hook restores the classes. Every optimizer subclass that does not define its own ``__call__``
(none of MindSpore's do) is covered, whether it was built before or after the hook. ``hook(optimizer, args,
kwargs)``: ``args[0]`` is the tuple of gradients, in the order of ``optimizer.parameters``. A hook that raises
is logged once and skipped; the optimizer always runs.
"""

import itertools
import logging
from typing import Any, Callable, Dict, List, Set, Tuple

from engines.adapters.mindspore.cell_capture import _ORIGINAL_CALL

log = logging.getLogger(__name__)

Hook = Callable[[Any, tuple, dict], None]

_pre: Dict[int, Hook] = {}
_post: Dict[int, Hook] = {}
_ids = itertools.count()
_patched: List[Tuple[Any, Any]] = []  # (optimizer base class, its own __call__ or None)
_failed: Set[int] = set()  # the hooks that failed once (logged)


def optimizer_bases() -> List[Any]:
    """MindSpore's optimizer base classes (framework classes: ``Any`` here)."""
    out: List[Any] = []
    try:
        from mindspore.nn.optim.optimizer import Optimizer

        out.append(Optimizer)
    except ImportError:
        pass
    try:
        from mindspore.experimental.optim.optimizer import Optimizer as ExperimentalOptimizer

        out.append(ExperimentalOptimizer)
    except ImportError:
        pass
    return out


def _run(hooks: Dict[int, Hook], optimizer: Any, args: tuple, kwargs: dict) -> None:
    for key, hook in list(hooks.items()):
        try:
            hook(optimizer, args, kwargs)
        except Exception:  # never break training
            if key not in _failed:
                _failed.add(key)
                log.exception("probe-tui: an optimizer hook failed; it is skipped, training continues")


def _call(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
    _run(_pre, optimizer, args, kwargs)
    out = _ORIGINAL_CALL(optimizer, *args, **kwargs)
    _run(_post, optimizer, args, kwargs)
    return out


_call.__wrapped__ = _ORIGINAL_CALL  # type: ignore[attr-defined]


class HookHandle:
    def __init__(self, table: Dict[int, Hook], key: int) -> None:
        self._table = table
        self._key = key

    def remove(self) -> None:
        self._table.pop(self._key, None)
        if not _pre and not _post:
            _unpatch()


def _patch() -> None:
    if _patched:
        return
    for base in optimizer_bases():
        _patched.append((base, vars(base).get("__call__")))
        base.__call__ = _call


def _unpatch() -> None:
    while _patched:
        base, original = _patched.pop()
        if original is None:
            if "__call__" in vars(base):
                delattr(base, "__call__")
        else:
            base.__call__ = original


def register_optimizer_pre_hook(hook: Hook) -> HookHandle:
    key = next(_ids)
    _pre[key] = hook
    _patch()
    return HookHandle(_pre, key)


def register_optimizer_post_hook(hook: Hook) -> HookHandle:
    key = next(_ids)
    _post[key] = hook
    _patch()
    return HookHandle(_post, key)


def named_parameters(optimizer: Any) -> List[Tuple[str, Any]]:
    """``(name, parameter)`` in the order the optimizer receives gradients (MindSpore names are full paths)."""
    params: Any = getattr(optimizer, "parameters", None)
    if params is None:
        params = getattr(optimizer, "_parameters", ())
    return [(str(p.name), p) for p in params]

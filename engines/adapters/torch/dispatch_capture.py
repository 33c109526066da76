"""The fallback below the function mode: a ``TorchDispatchMode`` for ops Python-level interception cannot see.

With torch >= 2.3 the function mode sees ``torch.distributed`` collectives (they go through torch-function
handling) and ``torch.ops.<ns>`` custom ops, so this mode is not installed (it costs ~4.6 us per aten op, forward
and backward). On older torch, where ``dist.all_reduce`` is plain Python, it is installed while
``torch.distributed`` is initialised and records the c10d ops (``c10d.allreduce_`` -> ``Distributed.all_reduce``)
and ops of the watched namespaces (``npu``) that no recorded API call encloses; everything else passes through.
"""

import inspect
from typing import Any, FrozenSet

from torch.utils._python_dispatch import TorchDispatchMode

from engines.capture import naming

WATCHED_NAMESPACES: FrozenSet[str] = frozenset(("c10d", "npu"))


def function_mode_sees_collectives() -> bool:
    """Does this torch route ``dist.all_reduce`` through torch-function handling (so the function mode sees it)?"""
    try:
        import torch.distributed as dist

        if not dist.is_available():
            return True
        fn = inspect.unwrap(dist.all_reduce)
        return "handle_torch_function" in fn.__code__.co_names
    except Exception:
        return True


def needed(force: bool = False) -> bool:
    if force:
        return True
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return False
    except Exception:
        return False
    return not function_mode_sees_collectives()


class CaptureDispatchMode(TorchDispatchMode):
    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        s = self.session
        namespace = getattr(func, "namespace", "")
        if namespace not in WATCHED_NAMESPACES or s.busy_depth or s.api_depth or not s.running:
            return func(*args, **kwargs)
        info = s.api_infos.get(func)
        if info is None:
            info = s.api_info(func)
        if info is False or not info.captured:
            return func(*args, **kwargs)
        if info.prefix != naming.PREFIX_DISTRIBUTED and info.prefix != naming.PREFIX_NPU:
            return func(*args, **kwargs)
        return s.api_capture.call(info, _completed(func), args, kwargs)


def _completed(func):
    """c10d ops return before the collective is done: wait for it, so the recorded result is the real one."""

    def run(*args, **kwargs):
        out = func(*args, **kwargs)
        for item in out if isinstance(out, (tuple, list)) else (out,):
            wait = getattr(item, "wait", None)
            if callable(wait) and not hasattr(item, "shape"):
                wait()
        return out

    return run

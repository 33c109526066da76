"""msprobe's ``module_dump(module, name)`` / ``module_dump_end()`` on a PyTorch capture session.

Between the two calls nothing is recorded except the calls of ``module`` itself, each as one module record
``Module.{name}.{Class}.forward.{N}`` (inputs, parameters, outputs) and its ``backward`` record, at any level:
the APIs and submodules it runs inside, and whatever else runs in that window, are not (docs/MSPROBE.md).
The window is the session's ``busy`` state (which no hook records); the module's own hooks record it anyway.
"""

from typing import Any, Dict, List, Optional

import torch

from engines.adapters.torch.api_capture import is_compiling
from engines.adapters.torch.module_capture import class_name


class ModuleDump:
    """One ``module_dump`` window of a session."""

    def __init__(self, session: Any, module: Any, name: str) -> None:
        if not isinstance(module, torch.nn.Module):
            raise ValueError("module_dump: module must be a torch.nn.Module, got %s" % type(module).__name__)
        if not isinstance(name, str) or not name:
            raise ValueError("module_dump: name must be a non-empty string, got %r" % (name,))
        self.session = session
        self.module = module
        self.named = (name, class_name(type(module)))
        self.handles: List[Any] = []
        tree = session.modules
        tree.dumped[id(module)] = self
        self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
        self.handles.append(module.register_forward_hook(self._post, with_kwargs=True, always_call=True))
        session.busy_depth += 1  # the window: nothing else is recorded

    def _pre(self, module: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[tuple]:
        s = self.session
        if not s.running or is_compiling():
            return None
        try:
            s.modules.enter(module, args, kwargs, named=self.named)
        except Exception as exc:  # never break training
            s.summary.failed("module_dump of %s" % self.named[0], exc)
        return None

    def _post(self, module: Any, args: tuple, kwargs: Dict[str, Any], output: Any) -> None:
        s = self.session
        tree = s.modules
        frame = tree._pop(module)
        if frame is None or frame.record < 0 and not frame.want_bwd:
            return None
        try:
            tree.exit(frame, kwargs or {}, output)
        except Exception as exc:  # never break training
            s.summary.failed("module_dump of %s" % self.named[0], exc)
        return None

    def end(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        tree = self.session.modules
        if tree.dumped.get(id(self.module)) is self:
            del tree.dumped[id(self.module)]
        self.session.busy_depth -= 1

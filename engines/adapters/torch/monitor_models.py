"""Finding a script's model and naming its parameters, with no code change (shared by monitor and grad_probe).

Every module called while no other module is running is a *root* (the model, a loss module). Roots are found
through torch's global module forward hooks; parameter names come from the roots' ``named_parameters()`` with
wrapper prefixes stripped (DDP ``module.``, FSDP, ``torch.compile``'s ``_orig_mod.``). A parameter that no root
owns (a model never called as a module) is named by its optimizer position: ``param_groups.<g>.<i>``.
"""

import logging
import threading
from typing import Callable, Dict, List, Optional

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from engines.monitor.naming import strip_wrappers

log = logging.getLogger(__name__)


class ModelFinder:
    """Tracks top-level module calls. ``on_root(module)`` runs once per new root, before its first forward.

    The last top-level output that is a 0-dim floating tensor requiring grad is kept as ``last_loss`` (a model
    returning its loss, or an ``nn`` loss module): the monitor records it without a host sync of its own.
    """

    def __init__(self, on_root: Optional[Callable[[torch.nn.Module], None]] = None):
        self.roots: List[torch.nn.Module] = []
        self._root_ids = set()
        self._on_root = on_root
        self._local = threading.local()
        self._handles = []
        self.last_loss: Optional[torch.Tensor] = None

    # -- hooks -------------------------------------------------------------------------------------------------
    def install(self) -> "ModelFinder":
        if not self._handles:
            self._handles.append(register_module_forward_pre_hook(self._pre))
            try:
                self._handles.append(register_module_forward_hook(self._post, always_call=True))
            except TypeError:  # torch < 2.1 has no always_call
                self._handles.append(register_module_forward_hook(self._post))
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _pre(self, module, args):
        depth = self._depth()
        if depth == 0 and id(module) not in self._root_ids:
            self.add_root(module)
        self._local.depth = depth + 1

    def _post(self, module, args, output):
        depth = max(0, self._depth() - 1)
        self._local.depth = depth
        if depth == 0:
            loss = _loss_of(output)
            if loss is not None:
                self.last_loss = loss

    # -- roots -------------------------------------------------------------------------------------------------
    def add_root(self, module: torch.nn.Module) -> None:
        if id(module) in self._root_ids:
            return
        self._root_ids.add(id(module))
        self.roots.append(module)
        if self._on_root is not None:
            try:
                self._on_root(module)
            except Exception:  # training must never crash because of the tool
                log.exception("probe-tui: setting up hooks on %s failed; it is not monitored", type(module).__name__)

    def take_loss(self) -> Optional[torch.Tensor]:
        loss, self.last_loss = self.last_loss, None
        return loss


def _loss_of(output) -> Optional[torch.Tensor]:
    candidate = getattr(output, "loss", None) if not isinstance(output, torch.Tensor) else output
    if candidate is None and isinstance(output, dict):
        candidate = output.get("loss")
    if (
        isinstance(candidate, torch.Tensor)
        and candidate.dim() == 0
        and candidate.is_floating_point()
        and candidate.requires_grad
    ):
        return candidate.detach()
    return None


class ParamNamer:
    """``id(parameter) -> name`` over the roots a ModelFinder found (or modules given explicitly)."""

    def __init__(self, finder: Optional[ModelFinder] = None, modules: Optional[List[torch.nn.Module]] = None):
        self._finder = finder
        self._modules = list(modules or [])
        self._names: Dict[int, str] = {}
        self._indexed = 0

    def _sources(self) -> List[torch.nn.Module]:
        return self._modules + (self._finder.roots if self._finder is not None else [])

    def _reindex(self) -> None:
        sources = self._sources()
        if len(sources) == self._indexed:
            return
        taken = set(self._names.values())
        for root in sources[self._indexed:]:
            for name, param in root.named_parameters():
                if id(param) in self._names:
                    continue
                clean = strip_wrappers(name)
                if clean in taken:  # a second model with the same layout: keep names unique
                    clean = f"{type(root).__name__}.{clean}"
                self._names[id(param)] = clean
                taken.add(clean)
        self._indexed = len(sources)

    def name(self, param: torch.Tensor, fallback: str) -> str:
        name = self._names.get(id(param))
        if name is None:
            self._reindex()
            name = self._names.get(id(param))
        return name if name is not None else fallback

    def optimizer_params(self, optimizer) -> List["tuple[str, torch.Tensor]"]:
        """``(name, parameter)`` for every parameter the optimizer updates, in its order."""
        named = []
        for g, group in enumerate(optimizer.param_groups):
            for i, param in enumerate(group["params"]):
                named.append((self.name(param, f"param_groups.{g}.{i}"), param))
        return named

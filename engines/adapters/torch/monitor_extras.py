"""The monitor's less common options: the module structure (``print_struct``), module call sites
(``stack_info``) and per-micro-batch weight gradients before reduction (``monitor_mbs_grad``).

``print_struct`` and ``stack_info`` record the first collected step through global module hooks that remove
themselves after it, then write ``module_struct.json`` / ``stack_info.json`` in the rank folder; unlike msprobe,
training goes on. ``monitor_mbs_grad`` puts a tensor hook on each selected parameter: it receives the gradient
of one ``backward()`` before it is accumulated into ``.grad`` (and, under DDP, before the all-reduce), so every
micro-batch gives one value per metric, as series ``grad_unreduced/<param>`` for the first micro-batch of a step
and ``grad_unreduced/<param>:<i>`` for the i-th after it. The hook returns nothing, so gradients are unchanged.
"""

import json
import logging
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from engines import safe_fs

log = logging.getLogger(__name__)


def _describe(value) -> Dict[str, str]:
    from engines.adapters.torch.monitor_hooks import flatten_tensors

    tensors = flatten_tensors(value)
    out: Dict[str, str] = {"config": "tensor" if isinstance(value, torch.Tensor) else f"tuple[{len(tensors)}]"}
    for i, t in enumerate(tensors):
        out[str(i)] = f"size={tuple(t.shape)}, dtype={t.dtype}"
    return out


class StructureRecorder:
    """Records module inputs/outputs (``struct``) and/or call sites (``stacks``) for one step."""

    def __init__(self, rank_dir: Path, names: Callable[[torch.nn.Module], Optional[str]], *, struct: bool,
                 stacks: bool):
        self.rank_dir = Path(rank_dir)
        self._names = names
        self.struct: Dict[str, Dict[str, Dict[str, str]]] = {}
        self.stacks: Dict[str, List[str]] = {}
        self._want_struct, self._want_stacks = struct, stacks
        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        self.done = False

    def _pre(self, module, args):
        name = self._names(module)
        if name is None:
            return None
        if self._want_stacks and name not in self.stacks:
            frames = traceback.format_stack(limit=12)[:-2]
            self.stacks[name] = [line.strip() for line in frames if "torch/nn/modules" not in line]
        return None

    def _post(self, module, args, output):
        name = self._names(module)
        if name is None or not self._want_struct or name in self.struct:
            return None
        try:
            self.struct[name] = {"input": _describe(args), "output": _describe(output)}
        except Exception:  # a structure we cannot describe is skipped, never raised into training
            log.debug("probe-tui monitor: describing %s failed", name, exc_info=True)
        return None

    def finish(self) -> List[Path]:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.done = True
        written = []
        if self._want_struct:
            written.append(_write(self.rank_dir / "module_struct.json", self.struct))
        if self._want_stacks:
            written.append(_write(self.rank_dir / "stack_info.json", self.stacks))
        return written


def _write(path: Path, data) -> Path:
    return safe_fs.write_atomic(path, json.dumps(data, indent=1), tmp=path.with_name(path.name + ".partial"))


class MicroBatchGrads:
    """Parameter tensor hooks: ``sink(name, grad)`` with each micro-batch's gradient of a selected parameter."""

    def __init__(self, sink: Callable[[str, torch.Tensor], None], is_active: Callable[[], bool]):
        self._sink = sink
        self._is_active = is_active
        self._handles = []
        self._seen = set()
        self._calls: Dict[str, int] = {}

    def attach(self, named_params) -> None:
        for name, param in named_params:
            if id(param) in self._seen or not param.requires_grad:
                continue
            self._seen.add(id(param))
            self._handles.append(param.register_hook(self._hook(name)))

    def _hook(self, name: str):
        def on_grad(grad):
            if self._is_active() and grad is not None:
                call = self._calls.get(name, 0)
                self._calls[name] = call + 1
                self._sink(name if call == 0 else f"{name}:{call}", grad)
            return None

        return on_grad

    def new_step(self) -> None:
        self._calls.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._seen = set()

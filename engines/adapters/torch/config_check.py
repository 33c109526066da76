"""config_check on PyTorch: framework and device facts, and the training hooks (docs/CONFIG_CHECK.md).

Global hooks, nothing patched: a module forward pre-hook finds the model (the first module called from outside any
other module, unless one is given) and, at its first call of each step, takes the random state and deterministic
flags (first call only), the weights at init (first call only) and the checksum of every sample of the batch it
receives (first ``data_batches`` steps); optimizer-step hooks count the steps, take the optimizer's settings at the
first step and the weights after the chosen steps. A hook that fails notes why and is skipped.
"""

from __future__ import annotations

import zlib
from typing import Any, Dict, List, Sequence

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from engines.adapters.torch.environment import describe, seed_state
from engines.config_check.collect import sample_checksums

MAX_SAMPLES = 4096


def framework_facts() -> Dict[str, str]:
    info = {k: str(v) for k, v in describe().items() if k not in ("seed_all", "num_threads", "deterministic_algorithms",
                                                                  "cudnn_deterministic", "cudnn_benchmark")}
    info["num_threads"] = str(torch.get_num_threads())
    info["default_dtype"] = str(torch.get_default_dtype())
    if torch.cuda.is_available():
        info["device_count"] = str(torch.cuda.device_count())
        info["cudnn_version"] = str(torch.backends.cudnn.version())
    return info


def _deterministic() -> Dict[str, str]:
    out = {"deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()),
           "cudnn.deterministic": str(bool(torch.backends.cudnn.deterministic)),
           "cudnn.benchmark": str(bool(torch.backends.cudnn.benchmark)),
           "matmul.allow_tf32": str(bool(torch.backends.cuda.matmul.allow_tf32)),
           "cudnn.allow_tf32": str(bool(torch.backends.cudnn.allow_tf32)),
           "float32_matmul_precision": str(torch.get_float32_matmul_precision())}
    return out


def _random() -> Dict[str, str]:
    out = {"torch.initial_seed": str(torch.initial_seed()),
           "torch.rng_state": "{:08x}".format(zlib.crc32(torch.get_rng_state().numpy().tobytes()))}
    if torch.cuda.is_available():
        try:
            out["cuda.initial_seed"] = str(torch.cuda.initial_seed())
        except Exception:
            pass
    for key, value in seed_state().items():
        out["seed_all." + str(key)] = str(value)
    return out


def _bytes(t: Any) -> bytes:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.dtype in (torch.bfloat16,) or not hasattr(t, "numpy"):
        t = t.view(torch.int16)
    try:
        return bytes(t.numpy().tobytes())
    except (TypeError, RuntimeError):  # float8 and other dtypes numpy lacks
        return bytes(t.view(torch.uint8).numpy().tobytes())


def tensor_checksum(t: Any) -> str:
    return "{} {} {:08x}".format(str(t.dtype).replace("torch.", ""), list(t.shape), zlib.crc32(_bytes(t)))


def _tensors(value: Any, out: List[Any], depth: int = 0) -> None:
    if depth > 8:
        return
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out, depth + 1)


def batch_checksums(inputs: Any) -> List[str]:
    """One checksum per sample (the first dimension of the first input tensor); input tensors with another first
    dimension are one more entry, whole."""
    tensors: List[Any] = []
    _tensors(inputs, tensors)
    if not tensors:
        return []
    first = tensors[0]
    n = int(first.shape[0]) if first.dim() > 0 else 0
    per_sample = [t for t in tensors if t.dim() > 0 and int(t.shape[0]) == n] if n else []
    rest = [t for t in tensors if not any(t is p for p in per_sample)]
    rows = [[_bytes(t[i]) for t in per_sample] for i in range(min(n, MAX_SAMPLES))]
    out = sample_checksums(rows)
    if rest:
        out.append("other " + sample_checksums([[_bytes(t) for t in rest]])[0])
    return out


class TrainingHooks:
    """The process-wide hooks of one :class:`engines.config_check.session.CheckSession`."""

    def __init__(self, session: Any, *, model: Any = None, weight_steps: Sequence[int] = (),
                 data_batches: int = 2) -> None:
        self.session = session
        self.model = model
        self.weight_steps = set(weight_steps)
        self.data_batches = data_batches
        self.step = 0
        self.depth = 0
        self.seen_step = -1
        self.first = True
        self.handles: List[Any] = []

    def install(self) -> None:
        self.handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post),
                        register_optimizer_step_post_hook(self._after_step)]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def _guard(self, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the tool never breaks training: say it once, skip the record
            self.session.note("{} skipped ({}: {})".format(what, type(exc).__name__, exc))

    def _pre(self, module: Any, inputs: Any) -> None:
        outer = self.depth == 0
        self.depth += 1
        if not outer:
            return
        if self.model is None:
            self.model = module
        if module is not self.model or self.seen_step == self.step:
            return
        self.seen_step = self.step
        if self.first:
            self.first = False
            self._guard("random state", lambda: self.session.first_forward(_random(), _deterministic()))
            self._guard("weights at init", self._weights, "init")
        if self.step < self.data_batches:
            self._guard("batch {}".format(self.step), lambda: self.session.batch(self.step, batch_checksums(inputs)))

    def _post(self, module: Any, inputs: Any, output: Any) -> None:
        self.depth = max(0, self.depth - 1)

    def _weights(self, label: str) -> None:
        if self.model is None or not hasattr(self.model, "named_parameters"):
            return
        with torch.no_grad():
            self.session.weights(label, {name: tensor_checksum(p) for name, p in self.model.named_parameters()})

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        step = self.step
        if step == 0:
            self._guard("optimizer settings", self._settings, optimizer)
        if step in self.weight_steps:
            self._guard("weights after step {}".format(step), self._weights, "step{}".format(step))
        self.step += 1
        self.depth = 0
        self.session.step_done(step)

    def _settings(self, optimizer: Any) -> None:
        values = {"optimizer": type(optimizer).__name__}
        for i, group in enumerate(getattr(optimizer, "param_groups", [])):
            for key, value in group.items():
                if key != "params":
                    values["param_groups.{}.{}".format(i, key)] = str(value)
        self.session.hyperparameters(values)

"""Helpers for the in-script debugger tests: the demo's training loop written as a user's script with msprobe's
calls in it, and the same config run through ``probe-tui --run`` (``run_job``) for comparison."""

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from engines.events import NullSink
from engines.runner import run_job
from schemas import load_config


def write_config(tmp_path: Path, name: str, config: Dict[str, Any]) -> Path:
    path = tmp_path / (name + ".json")
    path.write_text(json.dumps(config))
    return path


def only_run(dump_path: Path) -> Path:
    runs = sorted(p for p in Path(dump_path).iterdir() if p.is_dir() and p.name != "latest")
    assert len(runs) == 1, runs
    return runs[0]


def run_json(run_dir: Path) -> Dict[str, Any]:
    return json.loads((Path(run_dir) / "run.json").read_text())


def via_run(config: Dict[str, Any], demo: Dict[str, Any], dump_path: Path):
    """The same config under ``probe-tui --run`` on the demo: (outcome, rank0 folder)."""
    job = load_config(dict(config, dump_path=str(dump_path), target={"demo": demo}))
    outcome = run_job(job, events=NullSink())
    assert outcome.status == "finished", outcome.summary.get("error")
    return outcome, Path(outcome.run_dir) / "rank0"


def torch_demo_in_script(demo: Dict[str, Any], make_debugger: Callable[[], Any], *, class_calls: bool = False,
                         lifecycle: bool = True, monitor: bool = False,
                         end: str = "stop") -> Tuple[Any, Dict[str, Any], List[float]]:
    """The PyTorch demo's loop as a user writes it, with msprobe's documented placement: the debugger made after
    the model, ``start(model)`` at the top of the step, ``stop()`` and ``step()`` after ``optimizer.step()``
    (``class_calls``: as ``PrecisionDebugger.start(model)`` ...; ``end``: "stop" or msprobe's older
    "forward_backward_dump_end"). ``monitor``: ``debugger.monitor(model)`` once,
    after the model is built (grad_probe). Returns (debugger, close() summary, losses)."""
    import torch
    import torch.nn.functional as F

    from engines.adapters.torch.demo import AUTOCAST_DTYPES, build_model, make_optimizer
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs
    from probe_tui import PrecisionDebugger

    knobs = resolve_knobs(demo)
    torch.manual_seed(knobs.seed)
    model = build_model(knobs)
    model.train()
    optimizer = make_optimizer(model, knobs)
    debugger = make_debugger()
    if monitor:
        debugger.monitor(model)
    calls = PrecisionDebugger if class_calls else debugger
    autocast = AUTOCAST_DTYPES.get(knobs.dtype)
    losses = []
    for step, (tokens, targets) in enumerate(batches(knobs)):
        tokens, targets = torch.from_numpy(tokens), torch.from_numpy(targets)
        model.schedule.step = step  # the demo's faults know their step
        optimizer.zero_grad()
        if lifecycle:
            calls.start(model)
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            logits = model(tokens)
            loss = F.cross_entropy(logits.view(-1, knobs.vocab), targets.view(-1))
        loss.backward()
        optimizer.step()
        if lifecycle:
            getattr(calls, end)()
            calls.step()
        losses.append(loss.item())
    return debugger, debugger.close(), losses


def mindspore_demo_in_script(demo: Dict[str, Any], make_debugger: Callable[[], Any], *, monitor: Optional[str] = None,
                             lifecycle: bool = True) -> Tuple[Any, Dict[str, Any], List[float]]:
    """The MindSpore demo's loop with msprobe's calls: ``start(model)`` before the gradient call, ``stop()`` after
    it, ``step()`` after the optimizer call. ``monitor``: "optimizer" or "model", the object given to
    ``debugger.monitor`` (grad_probe; msprobe's MindSpore API takes the optimizer)."""
    import mindspore as ms
    from mindspore import Tensor

    from engines.adapters.mindspore import demo as ms_demo
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs

    knobs = resolve_knobs(demo)
    ms_demo.ensure_pynative()
    ms.set_seed(knobs.seed)
    model = ms_demo.build_model(knobs)
    model.set_train(True)
    optimizer = ms_demo.make_optimizer(model, knobs)
    debugger = make_debugger()
    if monitor:
        debugger.monitor(optimizer if monitor == "optimizer" else model)
    grad_fn = ms.value_and_grad(ms_demo.loss_function(model, knobs.vocab, knobs.dtype != "fp32"), None,
                                optimizer.parameters)
    losses = []
    for step, (tokens, targets) in enumerate(batches(knobs)):
        model.schedule.step = step
        if lifecycle:
            debugger.start(model)
        loss, grads = grad_fn(Tensor(tokens), Tensor(targets))
        if lifecycle:
            debugger.stop()
        optimizer(grads)
        if lifecycle:
            debugger.step()
        losses.append(float(loss.asnumpy()))
    return debugger, debugger.close(), losses

"""The online check's backward on PyTorch (docs/ACC_CHECK.md, "Online check").

For a selected call whose inputs need gradients, ``watch`` hangs an ``OnlineBackward`` on the nodes the call
created (``backward_capture.attach``: hooks only, nothing inserted, so gradients stay bit-identical). When every
hook has fired it holds the gradients w.r.t. the call's outputs (what arrived) and w.r.t. its inputs (what the
device computed); ``finish`` re-runs the call on the CPU copies of its inputs taken before the call, in the
reference dtype with autograd on, back-propagates the same output gradients, and judges each input's gradient
as a gradient (``rules.judge_tensor(backward=True)``). The re-run runs inside the hook while the session is busy
(nothing it does is captured); the CPU RNG state is restored after it.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from engines.acc_check import prescreen, rules
from engines.adapters.torch.acc_replay import flatten_outputs, to_numpy
from engines.adapters.torch.backward_capture import attach, input_edge
from engines.capture.backward import PendingBackward

Judged = Callable[[List[rules.OutputResult]], None]


class OnlineBackward(PendingBackward):
    """Collects one call's gradients on the CPU; ``on_complete(self)`` when every hook has fired."""

    def __init__(self, session: Any, name: str, on_complete: Callable[["OnlineBackward"], None]) -> None:
        super().__init__(session, name, 0, "", 0, 0)
        self.grad_out: Dict[str, torch.Tensor] = {}
        self.grad_in: Dict[str, torch.Tensor] = {}
        self.on_complete = on_complete

    def decide(self) -> bool:
        self.decided = self.admitted = True
        return True

    def grad_of_output(self, slot: str, grad: Any) -> None:
        if grad is not None:
            self.grad_out[slot] = grad.detach().to("cpu", copy=True)

    def grad_of_input(self, slot: str, grad: Any) -> None:
        if grad is None:
            return
        g = grad.detach().to("cpu", copy=True)
        prev = self.grad_in.get(slot)
        self.grad_in[slot] = g if prev is None else prev + g

    def complete(self) -> None:
        if self.done:
            return
        self.done = True
        self.on_complete(self)


def input_edges(tensors: List[torch.Tensor]) -> List[Any]:
    """The input edges (``input.<i>``, i the tensor's place among the call's tensors) that need gradients."""
    edges = []
    for i, t in enumerate(tensors):
        if t.is_floating_point():
            edge = input_edge("input.%d" % i, t)
            if edge is not None:
                edges.append(edge)
    return edges


def watch(session: Any, name: str, edges: List[Any], out: Any, seq: int,
          on_complete: Callable[[OnlineBackward], None]) -> bool:
    """Hook the call's backward; False when there is nothing to watch (no output needs a gradient)."""
    outputs = [(slot, v) for slot, v in flatten_outputs(out)
               if isinstance(v, torch.Tensor) and v.requires_grad and v.is_floating_point()]
    if not outputs or not edges:
        return False
    return attach(OnlineBackward(session, name, on_complete), edges, outputs, seq, want_inputs=True,
                  want_outputs=True)


def rerun(func: Any, args: Any, kwargs: Any, tensors: List[torch.Tensor], pending: OnlineBackward, api: str,
          ref: str, judged_dtype: Optional[torch.dtype]) -> List[rules.OutputResult]:
    """Judge the device's input gradients against the reference's. ``args``/``kwargs``: the copies in the
    reference dtype, ``tensors`` their tensors in ``input.<i>`` order; ``judged_dtype``: the dtype the device's
    kernel computed in when autocast lowered it (its gradients are judged with that dtype's thresholds)."""
    leaves: List[Tuple[str, torch.Tensor]] = []
    for slot in sorted(pending.grad_in, key=lambda s: int(s.split(".")[1])):
        t = tensors[int(slot.split(".")[1])]
        if not t.requires_grad:
            t.requires_grad_(True)
        leaves.append((slot, t))
    if not leaves or not pending.grad_out:
        return []
    rng = torch.get_rng_state()
    try:
        with torch.enable_grad(), torch.autocast("cpu", enabled=False):
            bench = dict(flatten_outputs(func(*args, **kwargs)))
            outs, grads = [], []
            for slot, g in pending.grad_out.items():
                b = bench.get(slot)
                if isinstance(b, torch.Tensor) and b.requires_grad and tuple(b.shape) == tuple(g.shape):
                    outs.append(b)
                    grads.append(g.to(b.dtype))
            if not outs:
                return []
            got = torch.autograd.grad(outs, [t for _, t in leaves], grads, allow_unused=True)
    finally:
        torch.set_rng_state(rng)
    results = []
    for (slot, _), ref_grad in zip(leaves, got):
        dev = pending.grad_in[slot]
        dtype = str(judged_dtype if judged_dtype is not None else dev.dtype)
        results.append(prescreen.judge("output" + slot[len("input"):], api, to_numpy(dev), dtype,
                                          None if ref_grad is None else to_numpy(ref_grad), "torch." + ref,
                                          backward=True))
    return results

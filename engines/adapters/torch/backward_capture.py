"""Backward records by observing the autograd graph: hooks on the nodes one call created, nothing inserted.

For a call (an API or a module) we know, from the forward pass, its input edges (each input's ``grad_fn`` and
``output_nr``, or the leaf itself) and its outputs. The nodes the call created are those with a sequence number
at or after the one taken before the call. Walking back from the outputs through those nodes finds the *boundary*
edges, the ones that leave the call for one of its inputs; a hook on each boundary node receives the gradient
flowing along each such edge, which summed per input is exactly the gradient w.r.t. that input from this call.
A pre-hook on each output node gives the gradient w.r.t. each output. Most ops create a single node whose edges
are all boundary edges: one hook gives both sides.

Nothing is wrapped and no identity node is added, so gradients and their accumulation order are unchanged:
capture on or off, the numbers are bit-identical (DECISIONS 10). In-place ops work because input edges are taken
before the call runs.
"""

from typing import Any, Dict, List, Optional, Tuple

import torch

from engines.capture import naming

MAX_WALK_NODES = 20000

_get_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)

InputEdge = Tuple[str, Any, int, Optional[torch.Tensor]]  # (slot, grad_fn or None, output_nr, leaf tensor or None)


def sequence_mark() -> int:
    """The sequence number the next autograd node created on this thread will get (-1 if unknown)."""
    if _get_sequence_nr is None:
        return -1
    return _get_sequence_nr()


def input_edge(slot: str, t: torch.Tensor) -> Optional[InputEdge]:
    """Where gradient for input ``t`` leaves a call, taken *before* the call (in-place ops rewrite grad_fn)."""
    if not t.requires_grad:
        return None
    fn = t.grad_fn
    if fn is None:
        return (slot, None, 0, t)
    return (slot, fn, t.output_nr, None)


def _accumulate_type() -> Any:
    leaf = torch.zeros(1, requires_grad=True)
    return type(leaf.view(1).grad_fn.next_functions[0][0])


_ACCUMULATE = _accumulate_type()


def _is_accumulate(node: Any) -> bool:
    return type(node) is _ACCUMULATE


class PendingBackward:
    """One backward record while its hooks fire; completed when every hook has fired (or at step end)."""

    __slots__ = ("name", "kind", "parent", "stack", "flags", "expected", "fired", "decided", "admitted",
                 "rows", "acc", "remaining", "done", "session")

    def __init__(self, session: Any, name: str, kind: int, parent: str, stack: int, flags: int) -> None:
        self.session = session
        self.name = name
        self.kind = kind
        # The enclosing module's backward record (msprobe's construct maps backward to backward).
        self.parent = naming.backward_of(parent) if parent else ""
        self.stack = stack
        self.flags = flags
        self.expected = 0
        self.fired = 0
        self.decided = False
        self.admitted = False
        self.rows: List[Tuple[str, torch.Tensor]] = []
        self.acc: Dict[str, torch.Tensor] = {}
        self.remaining: Dict[str, int] = {}
        self.done = False

    def decide(self) -> bool:
        if not self.decided:
            self.decided = True
            self.admitted = self.session.admit_backward(self)
        return self.admitted

    def grad_of_output(self, slot: str, grad: Optional[torch.Tensor]) -> None:
        if grad is not None:
            self.session.backward_row(self, "input" + slot[len("output"):], grad)

    def grad_of_input(self, slot: str, grad: Optional[torch.Tensor]) -> None:
        if grad is None:
            return
        left = self.remaining.get(slot, 1) - 1
        self.remaining[slot] = left
        prev = self.acc.pop(slot, None)
        total = grad if prev is None else prev + grad
        if left > 0:
            self.acc[slot] = total
            return
        self.session.backward_row(self, "output" + slot[len("input"):], total)

    def hook_fired(self) -> None:
        self.fired += 1
        if self.fired >= self.expected:
            self.complete()

    def complete(self) -> None:
        if self.done:
            return
        self.done = True
        for slot, total in self.acc.items():
            self.session.backward_row(self, "output" + slot[len("input"):], total)
        self.acc = {}
        self.session.finish_backward(self)


def attach(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, torch.Tensor]],
           seq_before: int, want_inputs: bool, want_outputs: bool, memo: Optional[Dict[int, Any]] = None) -> bool:
    """Register the hooks for one call. ``want_inputs``: gradients w.r.t. the call's inputs (the backward
    record's ``output.*`` slots); ``want_outputs``: w.r.t. its outputs (``input.*``). False when there is
    nothing to observe."""
    out_nodes: Dict[int, Tuple[Any, List[Tuple[int, str]]]] = {}
    for slot, t in outputs:
        fn = t.grad_fn
        if fn is None or not t.requires_grad:
            continue
        if seq_before >= 0 and fn._sequence_nr() < seq_before:
            continue  # returned an existing tensor: this call created no node for it
        entry = out_nodes.get(id(fn))
        if entry is None:
            entry = out_nodes[id(fn)] = (fn, [])
        entry[1].append((t.output_nr, slot))
    if not out_nodes:
        return _attach_identity(pending, input_edges, outputs, want_inputs, want_outputs)
    if seq_before < 0:
        seq_before = _fallback_mark(input_edges)

    # The same tensor may be passed twice (``x * x``): a key maps to every slot it fills, in argument order.
    by_node: Dict[Tuple[int, int], List[str]] = {}
    by_leaf: Dict[int, List[str]] = {}
    keep_alive = []
    for slot, fn, nr, leaf in input_edges:
        if leaf is not None:
            by_leaf.setdefault(id(leaf), []).append(slot)
            keep_alive.append(leaf)
        else:
            by_node.setdefault((id(fn), nr), []).append(slot)
            keep_alive.append(fn)

    def match_all(node: Any, nr: int) -> Optional[List[str]]:
        if _is_accumulate(node):
            var = getattr(node, "variable", None)
            return by_leaf.get(id(var)) if var is not None else None
        return by_node.get((id(node), nr))

    def match(node: Any, nr: int) -> Optional[str]:
        slots = match_all(node, nr)
        return slots[0] if slots else None

    boundary: Dict[int, Tuple[Any, List[Tuple[int, str]]]] = {}
    single = None
    if len(out_nodes) == 1:
        (fn, _), = out_nodes.values()
        edges = fn.next_functions
        matched = []
        used: Dict[int, int] = {}
        for k, (nxt, nr) in enumerate(edges):
            if nxt is None:
                continue
            slots = match_all(nxt, nr)
            if not slots:
                matched = None
                break
            # Edges follow the op's tensor arguments in order: the i-th edge to a repeated tensor is its i-th slot.
            i = used.get(id(slots), 0)
            used[id(slots)] = i + 1
            matched.append((k, slots[min(i, len(slots) - 1)]))
        if matched is not None:
            single = fn
            if matched:
                boundary[id(fn)] = (fn, matched)
    frontier: Optional[List[Tuple[Any, int, Any, int]]] = [] if memo is not None and len(out_nodes) == 1 else None
    if single is None:
        complete = _walk_boundary(out_nodes, match, seq_before, boundary, memo, frontier)
    else:
        complete = True
        if frontier is not None:
            frontier.extend((single, k, nxt, nr) for k, (nxt, nr) in enumerate(single.next_functions)
                            if nxt is not None)
    if frontier is not None and complete:
        # A parent module's walk jumps from this call's output node straight to the edges that leave it.
        (fn, _), = out_nodes.values()
        memo[id(fn)] = (fn, frontier)

    for _, pairs in boundary.values():
        for _, slot in pairs:
            pending.remaining[slot] = pending.remaining.get(slot, 0) + 1

    hooks = 0
    if single is not None:
        out_pairs = out_nodes[id(single)][1]
        in_pairs = boundary.get(id(single), (None, []))[1]
        single.register_hook(_node_hook(pending, in_pairs if want_inputs else [],
                                        out_pairs if want_outputs else [], keep_alive))
        hooks = 1
    else:
        if want_outputs:
            for fn, pairs in out_nodes.values():
                fn.register_prehook(_pre_hook(pending, pairs))
                hooks += 1
        if want_inputs:
            for fn, pairs in boundary.values():
                fn.register_hook(_node_hook(pending, pairs, [], keep_alive))
                hooks += 1
    pending.expected = hooks
    return hooks > 0


def _attach_identity(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, torch.Tensor]],
                     want_inputs: bool, want_outputs: bool) -> bool:
    """A call that returned inputs unchanged (``Dropout(p=0)``, ``Identity``, ``contiguous()`` of a contiguous
    tensor) created no node: the gradient w.r.t. such an output is the gradient of that very tensor, and equals
    the gradient w.r.t. the input it is. A pre-hook on the tensor's producer delivers it."""
    nodes: Dict[int, Tuple[Any, List[Tuple[int, str, List[str]]]]] = {}
    for slot, t in outputs:
        fn = t.grad_fn
        if fn is None or not t.requires_grad:
            continue
        same = [s for s, efn, enr, _ in input_edges if efn is fn and enr == t.output_nr]
        entry = nodes.get(id(fn))
        if entry is None:
            entry = nodes[id(fn)] = (fn, [])
        entry[1].append((t.output_nr, slot, same if want_inputs else []))
    if not nodes:
        return False
    for fn, items in nodes.values():
        fn.register_prehook(_identity_hook(pending, items, want_outputs))
    pending.expected = len(nodes)
    return True


def _identity_hook(pending: PendingBackward, items, want_outputs: bool):
    def hook(grad_outputs):
        session = pending.session
        if pending.done or not session.backward_open():
            return None
        try:
            with session.busy():
                if pending.decide():
                    for nr, slot, same in items:
                        grad = grad_outputs[nr] if nr < len(grad_outputs) else None
                        if grad is None:
                            continue
                        if want_outputs:
                            pending.grad_of_output(slot, grad)
                        for in_slot in same:
                            session.backward_row(pending, "output" + in_slot[len("input"):], grad)
                pending.hook_fired()
        except Exception as exc:
            session.summary.failed("backward hook of %s" % pending.name, exc)
            pending.flags |= naming.FLAG_PARTIAL
        return None

    return hook


def _walk_boundary(out_nodes, match, seq_before: int, boundary, memo=None, frontier=None) -> bool:
    """Walk from the output nodes through the call's own nodes; collect boundary edges (to an input) and, when
    ``frontier`` is given, every edge that leaves the call. A node that is the single output node of an earlier
    walked call (``memo``) is not walked again: its frontier edges stand for its inside. Returns False when the
    walk was cut short (``MAX_WALK_NODES``)."""
    stack = [fn for fn, _ in out_nodes.values()]
    seen = set(id(fn) for fn in stack)
    visited = 0
    while stack:
        if visited >= MAX_WALK_NODES:
            return False
        node = stack.pop()
        visited += 1
        cached = memo.get(id(node)) if memo else None
        if cached is not None and cached[0] is node:
            edges = cached[1]
        else:
            edges = [(node, k, nxt, nr) for k, (nxt, nr) in enumerate(node.next_functions) if nxt is not None]
        for src, k, nxt, nr in edges:
            slot = match(nxt, nr)
            if slot is not None:
                entry = boundary.get(id(src))
                if entry is None:
                    entry = boundary[id(src)] = (src, [])
                entry[1].append((k, slot))
                if frontier is not None:
                    frontier.append((src, k, nxt, nr))
                continue
            if id(nxt) in seen:
                continue
            if _is_accumulate(nxt) or nxt._sequence_nr() < seq_before:
                if frontier is not None:  # created before the call: outside it
                    frontier.append((src, k, nxt, nr))
                continue
            seen.add(id(nxt))
            stack.append(nxt)
    return True


def _fallback_mark(input_edges: List[InputEdge]) -> int:
    """Without torch's sequence counter: nodes newer than every input's node belong to the call."""
    best = -1
    for _, fn, _, _ in input_edges:
        if fn is not None:
            best = max(best, fn._sequence_nr())
    return best + 1


def _node_hook(pending: PendingBackward, in_pairs, out_pairs, keep_alive):
    def hook(grad_inputs, grad_outputs):
        session = pending.session
        if pending.done or not session.backward_open():
            return None
        try:
            with session.busy():
                if pending.decide():
                    for nr, slot in out_pairs:
                        if nr < len(grad_outputs):
                            pending.grad_of_output(slot, grad_outputs[nr])
                    for k, slot in in_pairs:
                        if k < len(grad_inputs):
                            pending.grad_of_input(slot, grad_inputs[k])
                pending.hook_fired()
        except Exception as exc:  # never break training
            session.summary.failed("backward hook of %s" % pending.name, exc)
            pending.flags |= naming.FLAG_PARTIAL
        return None

    hook._keep_alive = keep_alive  # type: ignore[attr-defined]
    return hook


def _pre_hook(pending: PendingBackward, out_pairs):
    def hook(grad_outputs):
        session = pending.session
        if pending.done or not session.backward_open():
            return None
        try:
            with session.busy():
                if pending.decide():
                    for nr, slot in out_pairs:
                        if nr < len(grad_outputs):
                            pending.grad_of_output(slot, grad_outputs[nr])
                pending.hook_fired()
        except Exception as exc:
            session.summary.failed("backward hook of %s" % pending.name, exc)
            pending.flags |= naming.FLAG_PARTIAL
        return None

    return hook

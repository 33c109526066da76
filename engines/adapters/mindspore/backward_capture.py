"""Backward records from MindSpore's PyNative autograd graph: hooks on the nodes one call created, nothing inserted.

MindSpore 2.10 exposes the graph it records under ``value_and_grad`` / ``grad``: ``tensor._grad_node`` is a
``BackwardNode`` with ``next_functions``, ``_sequence_nr()``, ``register_prehook(hook(grad_outputs))`` and
``register_hook(hook(grad_inputs, grad_outputs))``. For a call (an API or a cell) we know its input edges (each
input's node and output index, taken before the call) and its outputs. Walking back from the output nodes through
the nodes the call created (sequence number at or after the call's first) finds the boundary edges, the ones
leaving the call for one of its inputs; a hook on each boundary node receives the gradient along that edge, which
summed per input is the gradient w.r.t. that input from this call. A pre-hook on each output node gives the
gradient w.r.t. each output. Most ops create one node: one hook gives both sides.

Nothing is wrapped and no identity op is added (MindSpore's own ``Cell.register_backward_hook`` inserts one):
gradients are unchanged with capture on (DECISIONS 10). Leaf nodes are fresh Python objects on every access, so
they are matched by ``_unique_id()``; their sequence number is the maximum of uint64.
"""

from typing import Any, Dict, List, Optional, Tuple

from engines.capture import naming

MAX_WALK_NODES = 20000
_LEAF_SEQ = (1 << 63)  # leaves carry 2**64 - 1

InputEdge = Tuple[str, int, int, int]  # (slot, node unique id, output index, node sequence number or -1)


def grad_node(t: Any) -> Any:
    try:
        if not t._requires_grad:
            return None
        return t._grad_node
    except (AttributeError, RuntimeError):
        return None


def _seq(node: Any) -> int:
    s = node._sequence_nr()
    return -1 if s >= _LEAF_SEQ else s


def input_edge(slot: str, t: Any) -> Optional[InputEdge]:
    """Where gradient for input ``t`` leaves a call, taken *before* the call (in-place ops move the node)."""
    node = grad_node(t)
    if node is None:
        return None
    return (slot, node._unique_id(), int(t._output_index) if not node.is_leaf() else 0, _seq(node))


def sequence_mark(edges: List[InputEdge]) -> int:
    """The first sequence number the call's nodes can have: after every input's node (MindSpore has no global
    counter to read before a call)."""
    best = -1
    for _, _, _, seq in edges:
        best = max(best, seq)
    return best + 1


class PendingBackward:
    """One backward record while its hooks fire; completed when every hook has fired (or at step end)."""

    __slots__ = ("name", "kind", "parent", "stack", "flags", "expected", "fired", "decided", "admitted",
                 "rows", "acc", "remaining", "done", "session")

    def __init__(self, session: Any, name: str, kind: int, parent: str, stack: int, flags: int) -> None:
        self.session = session
        self.name = name
        self.kind = kind
        self.parent = naming.backward_of(parent) if parent else ""
        self.stack = stack
        self.flags = flags
        self.expected = 0
        self.fired = 0
        self.decided = False
        self.admitted = False
        self.rows: List[Tuple] = []
        self.acc: Dict[str, Any] = {}
        self.remaining: Dict[str, int] = {}
        self.done = False

    def decide(self) -> bool:
        if not self.decided:
            self.decided = True
            self.admitted = self.session.admit_backward(self)
        return self.admitted

    def grad_of_output(self, slot: str, grad: Any) -> None:
        if grad is not None:
            self.session.backward_row(self, "input" + slot[len("output"):], grad)

    def grad_of_input(self, slot: str, grad: Any) -> None:
        if grad is None:
            return
        left = self.remaining.get(slot, 1) - 1
        self.remaining[slot] = left
        prev = self.acc.pop(slot, None)
        if prev is not None:
            with self.session.busy():
                grad = prev + grad
        if left > 0:
            self.acc[slot] = grad
            return
        self.session.backward_row(self, "output" + slot[len("input"):], grad)

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


def attach(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, Any]],
           want_inputs: bool, want_outputs: bool) -> bool:
    """Register the hooks for one call; False when there is nothing to observe."""
    seq_before = sequence_mark(input_edges)
    out_nodes: Dict[int, Tuple[Any, List[Tuple[int, str]]]] = {}
    for slot, t in outputs:
        node = grad_node(t)
        if node is None or node.is_leaf():
            continue
        uid = node._unique_id()
        if _seq(node) < seq_before:
            continue  # returned an existing tensor: this call created no node for it
        entry = out_nodes.get(uid)
        if entry is None:
            entry = out_nodes[uid] = (node, [])
        entry[1].append((int(t._output_index), slot))
    if not out_nodes:
        return _attach_identity(pending, input_edges, outputs, want_inputs, want_outputs)

    # The same tensor may be passed twice (``x * x``): a key maps to every slot it fills, in argument order.
    by_edge: Dict[Tuple[int, int], List[str]] = {}
    for slot, uid, nr, _ in input_edges:
        by_edge.setdefault((uid, nr), []).append(slot)

    def match_all(node: Any, nr: int) -> Optional[List[str]]:
        return by_edge.get((node._unique_id(), 0 if node.is_leaf() else nr))

    def match(node: Any, nr: int) -> Optional[str]:
        slots = match_all(node, nr)
        return slots[0] if slots else None

    boundary: Dict[int, Tuple[Any, List[Tuple[int, str]]]] = {}
    single = None
    if len(out_nodes) == 1:
        (node, _), = out_nodes.values()
        matched: Optional[List[Tuple[int, str]]] = []
        used: Dict[int, int] = {}
        for k, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            slots = match_all(nxt, nr)
            if not slots:
                matched = None
                break
            i = used.get(id(slots), 0)
            used[id(slots)] = i + 1
            matched.append((k, slots[min(i, len(slots) - 1)]))
        if matched is not None:
            single = node
            if matched:
                boundary[node._unique_id()] = (node, matched)
    if single is None:
        _walk_boundary(out_nodes, match, seq_before, boundary)

    for _, pairs in boundary.values():
        for _, slot in pairs:
            pending.remaining[slot] = pending.remaining.get(slot, 0) + 1

    hooks = 0
    if single is not None:
        out_pairs = out_nodes[single._unique_id()][1]
        in_pairs = boundary.get(single._unique_id(), (None, []))[1]
        single.register_hook(_node_hook(pending, in_pairs if want_inputs else [], out_pairs if want_outputs else []))
        hooks = 1
    else:
        if want_outputs:
            for node, pairs in out_nodes.values():
                node.register_prehook(_pre_hook(pending, pairs))
                hooks += 1
        if want_inputs:
            for node, pairs in boundary.values():
                node.register_hook(_node_hook(pending, pairs, []))
                hooks += 1
    pending.expected = hooks
    return hooks > 0


def _attach_identity(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, Any]],
                     want_inputs: bool, want_outputs: bool) -> bool:
    """A call that returned inputs unchanged (``dropout(p=0)``, ``contiguous()`` of a contiguous tensor) created no
    node: the gradient w.r.t. such an output is the gradient of that very tensor, and equals the gradient w.r.t.
    the input it is. A pre-hook on the tensor's producer delivers it."""
    nodes: Dict[int, Tuple[Any, List[Tuple[int, str, List[str]]]]] = {}
    for slot, t in outputs:
        node = grad_node(t)
        if node is None or node.is_leaf():
            continue
        uid = node._unique_id()
        nr = int(t._output_index)
        same = [s for s, euid, enr, _ in input_edges if euid == uid and enr == nr]
        entry = nodes.get(uid)
        if entry is None:
            entry = nodes[uid] = (node, [])
        entry[1].append((nr, slot, same if want_inputs else []))
    if not nodes:
        return False
    for node, items in nodes.values():
        node.register_prehook(_identity_hook(pending, items, want_outputs))
    pending.expected = len(nodes)
    return True


def _walk_boundary(out_nodes, match, seq_before: int, boundary) -> None:
    stack = [node for node, _ in out_nodes.values()]
    seen = set(node._unique_id() for node in stack)
    visited = 0
    while stack and visited < MAX_WALK_NODES:
        node = stack.pop()
        visited += 1
        for k, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            slot = match(nxt, nr)
            if slot is not None:
                entry = boundary.get(node._unique_id())
                if entry is None:
                    entry = boundary[node._unique_id()] = (node, [])
                entry[1].append((k, slot))
                continue
            uid = nxt._unique_id()
            if uid in seen or nxt.is_leaf():
                continue
            if _seq(nxt) < seq_before:
                continue  # created before the call: outside it
            seen.add(uid)
            stack.append(nxt)


def _guarded(pending: PendingBackward, body) -> None:
    session = pending.session
    if pending.done or not session.backward_open():
        return None
    try:
        with session.busy():
            if pending.decide():
                body()
            pending.hook_fired()
    except Exception as exc:  # never break training
        session.summary.failed("backward hook of %s" % pending.name, exc)
        pending.flags |= naming.FLAG_PARTIAL
    return None


def _node_hook(pending: PendingBackward, in_pairs, out_pairs):
    def hook(grad_inputs, grad_outputs):
        def body() -> None:
            for nr, slot in out_pairs:
                if nr < len(grad_outputs):
                    pending.grad_of_output(slot, grad_outputs[nr])
            for k, slot in in_pairs:
                if k < len(grad_inputs):
                    pending.grad_of_input(slot, grad_inputs[k])

        return _guarded(pending, body)

    return hook


def _pre_hook(pending: PendingBackward, out_pairs):
    def hook(grad_outputs):
        def body() -> None:
            for nr, slot in out_pairs:
                if nr < len(grad_outputs):
                    pending.grad_of_output(slot, grad_outputs[nr])

        return _guarded(pending, body)

    return hook


def _identity_hook(pending: PendingBackward, items, want_outputs: bool):
    def hook(grad_outputs):
        def body() -> None:
            for nr, slot, same in items:
                grad = grad_outputs[nr] if nr < len(grad_outputs) else None
                if grad is None:
                    continue
                if want_outputs:
                    pending.grad_of_output(slot, grad)
                for in_slot in same:
                    pending.session.backward_row(pending, "output" + in_slot[len("input"):], grad)

        return _guarded(pending, body)

    return hook

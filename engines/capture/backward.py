"""Backward records by observing an autograd graph, framework-neutral: the bookkeeping and the hooks.

Both frameworks expose the graph a forward pass records (torch's ``grad_fn`` nodes, MindSpore's PyNative
``_grad_node``): nodes with ``next_functions``, ``register_prehook(hook(grad_outputs))`` and
``register_hook(hook(grad_inputs, grad_outputs))``. For one call (an API or a module) the adapter knows the input
edges (taken before the call) and the output nodes; what is the same for both:

- ``PendingBackward``: one backward record while its hooks fire, the gradients w.r.t. inputs summed over the
  edges that reach each input, completed when every hook has fired (or at step end);
- ``single_node_edges`` (most ops create one node whose edges all leave the call: one hook gives both sides),
  ``walk_boundary`` (otherwise: from the output nodes back through the call's own nodes to the edges that leave
  it) and ``install_hooks`` / ``install_identity_hooks`` (a call that created no node).

What is the adapter's: how a node is keyed (``id`` of torch's node, MindSpore's ``_unique_id()``), how an edge is
matched to an input (torch's leaves are ``AccumulateGrad`` nodes holding the variable), which nodes lie outside
the call (created before it), and reading tensors' nodes.
"""

from functools import partial
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from engines.capture import naming

MAX_WALK_NODES = 20000

# key of a node -> (node, [(edge or output index, slot)])
NodePairs = Dict[Any, Tuple[Any, List[Tuple[int, str]]]]


class PendingBackward:
    """One backward record while its hooks fire; completed when every hook has fired (or at step end)."""

    __slots__ = ("name", "kind", "parent", "stack", "flags", "expected", "fired", "decided", "admitted",
                 "rows", "acc", "remaining", "done", "session")

    def __init__(self, session: Any, name: str, kind: int, parent: str, stack: int, flags: int) -> None:
        self.session = session
        self.name = name
        self.kind = kind
        # The enclosing module's backward record (msprobe's construct maps backward to backward).
        self.parent = _backward_name(parent) if parent else ""
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
        """One edge's gradient w.r.t. input ``slot``; the row is written when every edge to it has delivered.
        Called inside a hook, so the addition runs while the session is busy (it is not recorded)."""
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


_BACKWARD_NAMES: Dict[str, str] = {}  # parent forward name -> its backward name (many calls share a parent)


def _backward_name(forward_name: str) -> str:
    name = _BACKWARD_NAMES.get(forward_name)
    if name is None:
        if len(_BACKWARD_NAMES) > 100000:  # indices restart every step: the names repeat, but keep it bounded
            _BACKWARD_NAMES.clear()
        name = _BACKWARD_NAMES[forward_name] = naming.backward_of(forward_name)
    return name


# -- finding the edges that leave a call --------------------------------------------------------------------
def single_node_edges(node: Any,
                      match_all: Callable[[Any, int], Optional[List[str]]]) -> Optional[List[Tuple[int, str]]]:
    """``[(edge index, input slot)]`` when every edge of ``node`` reaches an input of the call (the call is that
    one node), else None. ``match_all(next_node, nr)`` gives the slots an edge reaches (None: not an input)."""
    matched: List[Tuple[int, str]] = []
    used: Dict[int, int] = {}
    for k, (nxt, nr) in enumerate(node.next_functions):
        if nxt is None:
            continue
        slots = match_all(nxt, nr)
        if not slots:
            return None
        # Edges follow the op's tensor arguments in order: the i-th edge to a repeated tensor is its i-th slot.
        i = used.get(id(slots), 0)
        used[id(slots)] = i + 1
        matched.append((k, slots[min(i, len(slots) - 1)]))
    return matched


def walk_boundary(out_nodes: NodePairs, match: Callable[[Any, int], Optional[str]], boundary: NodePairs,
                  key: Callable[[Any], Any], outside: Callable[[Any], bool], memo: Optional[Dict[int, Any]] = None,
                  frontier: Optional[List[Tuple[Any, int, Any, int]]] = None) -> bool:
    """Walk from the output nodes through the call's own nodes; collect boundary edges (to an input, by
    ``match``) into ``boundary`` and, when ``frontier`` is given, every edge that leaves the call. ``outside(node)``:
    created before the call (or a leaf): not walked. A node that is the single output node of an earlier walked
    call (``memo``, keyed by ``id``) is not walked again: its frontier edges stand for its inside. Returns False
    when the walk was cut short (``MAX_WALK_NODES``)."""
    stack = [fn for fn, _ in out_nodes.values()]
    seen = set(key(fn) for fn in stack)
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
                src_key = key(src)
                entry = boundary.get(src_key)
                if entry is None:
                    entry = boundary[src_key] = (src, [])
                entry[1].append((k, slot))
                if frontier is not None:
                    frontier.append((src, k, nxt, nr))
                continue
            nxt_key = key(nxt)
            if nxt_key in seen:
                continue
            if outside(nxt):
                if frontier is not None:
                    frontier.append((src, k, nxt, nr))
                continue
            seen.add(nxt_key)
            stack.append(nxt)
    return True


def find_boundary(out_nodes: NodePairs, match_all: Callable[[Any, int], Optional[List[str]]],
                  key: Callable[[Any], Any], outside: Callable[[Any], bool], memo: Optional[Dict[int, Any]] = None
                  ) -> Tuple[Any, NodePairs]:
    """``(the call's only node or None, its boundary edges)``: one node whose edges all reach inputs is the
    whole call (``single_node_edges``); else ``walk_boundary``. With ``memo``, a call with one output node
    leaves its frontier there (keyed by ``id`` of that node), so an enclosing module's walk skips its inside."""
    def match(node: Any, nr: int) -> "Optional[str]":  # quoted: not evaluated at every call
        slots = match_all(node, nr)
        return slots[0] if slots else None

    boundary: NodePairs = {}
    single = None
    if len(out_nodes) == 1:
        (node, _), = out_nodes.values()
        matched = single_node_edges(node, match_all)
        if matched is not None:
            single = node
            if matched:
                boundary[key(node)] = (node, matched)
    frontier: Optional[List[Tuple[Any, int, Any, int]]] = [] if memo is not None and len(out_nodes) == 1 else None
    if single is None:
        complete = walk_boundary(out_nodes, match, boundary, key, outside, memo, frontier)
    else:
        complete = True
        if frontier is not None:
            frontier.extend((single, k, nxt, nr) for k, (nxt, nr) in enumerate(single.next_functions)
                            if nxt is not None)
    if memo is not None and frontier is not None and complete:
        # A parent module's walk jumps from this call's output node straight to the edges that leave it.
        (node, _), = out_nodes.values()
        memo[id(node)] = (node, frontier)
    return single, boundary


# -- hooks --------------------------------------------------------------------------------------------------
def install_hooks(pending: PendingBackward, out_nodes: NodePairs, boundary: NodePairs, single: Any,
                  single_key: Any, want_inputs: bool, want_outputs: bool, keep_alive: Any = None,
                  makers: "Optional[HookMakers]" = None) -> bool:
    """Register the hooks for one call: one node hook on ``single`` (the call's only node), else pre-hooks on
    the output nodes and node hooks on the boundary nodes. ``want_inputs``: gradients w.r.t. the call's inputs
    (the backward record's ``output.*`` slots); ``want_outputs``: w.r.t. its outputs (``input.*``). False when
    there is nothing to observe. ``makers``: how the hooks are made (closures unless given)."""
    mk = makers if makers is not None else CLOSURE_HOOKS
    for _, pairs in boundary.values():
        for _, slot in pairs:
            pending.remaining[slot] = pending.remaining.get(slot, 0) + 1
    hooks = 0
    if single is not None:
        out_pairs = out_nodes[single_key][1]
        in_pairs = boundary.get(single_key, (None, []))[1]
        single.register_hook(mk.node(pending, in_pairs if want_inputs else [], out_pairs if want_outputs else [],
                                     keep_alive))
        hooks = 1
    else:
        if want_outputs:
            for fn, pairs in out_nodes.values():
                fn.register_prehook(mk.pre(pending, pairs))
                hooks += 1
        if want_inputs:
            for fn, pairs in boundary.values():
                fn.register_hook(mk.node(pending, pairs, [], keep_alive))
                hooks += 1
    pending.expected = hooks
    return hooks > 0


IdentityItems = Dict[Any, Tuple[Any, List[Tuple[int, str, List[str]]]]]


def install_identity_hooks(pending: PendingBackward, nodes: IdentityItems, want_outputs: bool,
                           makers: "Optional[HookMakers]" = None) -> bool:
    """A call that returned inputs unchanged (``Dropout(p=0)``, ``Identity``, ``contiguous()`` of a contiguous
    tensor) created no node: the gradient w.r.t. such an output is the gradient of that very tensor, and equals
    the gradient w.r.t. the input it is. ``nodes``: key -> (the output's producer, [(output index, output slot,
    input slots it is)]); a pre-hook on each producer delivers it."""
    if not nodes:
        return False
    make = (makers if makers is not None else CLOSURE_HOOKS).identity
    for fn, items in nodes.values():
        fn.register_prehook(make(pending, items, want_outputs))
    pending.expected = len(nodes)
    return True


def _fire(pending: PendingBackward, deliver: Callable[..., None], *grads: Any) -> None:
    """What every hook does: nothing once the step is closed; else, while the session is busy, decide the record
    (filters) at its first hook, ``deliver`` the gradients, count the hook; a failure marks the record partial."""
    session = pending.session
    if pending.done or not session.backward_open():
        return None
    try:
        session.busy_depth += 1  # what ``with session.busy()`` does, without its two calls
        # the tool's own tensor work is not offered to the call interception (``ApiRecords.pause``; a task that
        # brings its own interception, free_benchmark's, may have none)
        api = session.api_capture
        pause = getattr(api, "pause", None)
        paused = pause() if pause is not None else None
        try:
            if pending.decided and pending.admitted or pending.decide():
                deliver(pending, *grads)
            pending.hook_fired()
        finally:
            if paused is not None:
                api.resume(paused)
            session.busy_depth -= 1
    except Exception as exc:  # never break training
        session.summary.failed("backward hook of %s" % pending.name, exc)
        pending.flags |= naming.FLAG_PARTIAL
    return None


Grads = Sequence[Any]  # the gradients autograd hands a hook (None where there is none)
EdgeSlots = Sequence[Tuple[int, str]]  # (edge number, slot name)
IdentityEdges = List[Tuple[int, str, List[str]]]  # (edge number, output slot, the input slots it is)


def _node_grads(pending: PendingBackward, grad_inputs: Grads, grad_outputs: Grads, in_pairs: EdgeSlots,
                out_pairs: EdgeSlots) -> None:
    for nr, slot in out_pairs:
        if nr < len(grad_outputs):
            pending.grad_of_output(slot, grad_outputs[nr])
    for k, slot in in_pairs:
        if k < len(grad_inputs):
            pending.grad_of_input(slot, grad_inputs[k])


def _identity_grads(pending: PendingBackward, grad_outputs: Grads, items: IdentityEdges, want_outputs: bool) -> None:
    for nr, slot, same in items:
        grad = grad_outputs[nr] if nr < len(grad_outputs) else None
        if grad is None:
            continue
        if want_outputs:
            pending.grad_of_output(slot, grad)
        for in_slot in same:
            pending.session.backward_row(pending, "output" + in_slot[len("input"):], grad)


def node_hook(pending: PendingBackward, in_pairs: EdgeSlots, out_pairs: EdgeSlots, keep_alive: Any = None
              ) -> Callable[[Grads, Grads], None]:
    """A node hook: gradients w.r.t. the node's inputs (edges ``in_pairs``) and outputs (``out_pairs``).
    ``keep_alive`` lives as long as the hook (a default argument: no attribute dictionary made a hook)."""
    def hook(grad_inputs: Grads, grad_outputs: Grads, _keep_alive: Any = keep_alive) -> None:
        return _fire(pending, _node_grads, grad_inputs, grad_outputs, in_pairs, out_pairs)

    return hook


def pre_hook(pending: PendingBackward, out_pairs: EdgeSlots) -> Callable[[Grads], None]:
    """A node pre-hook: gradients w.r.t. the node's outputs (``out_pairs``)."""
    def hook(grad_outputs: Grads) -> None:
        return _fire(pending, _node_grads, (), grad_outputs, (), out_pairs)

    return hook


def identity_hook(pending: PendingBackward, items: IdentityEdges, want_outputs: bool) -> Callable[[Grads], None]:
    def hook(grad_outputs: Grads) -> None:
        return _fire(pending, _identity_grads, grad_outputs, items, want_outputs)

    return hook


# The same hooks as ``functools.partial`` objects, for frameworks that take any callable (torch): a partial and its
# argument tuple are two objects for the collector where a closure is a function, its cells, the tuple of them and
# its defaults (a call runs the same two Python frames). A step's hooks live until its backward ran.
def _node_fire(pending: PendingBackward, in_pairs: EdgeSlots, out_pairs: EdgeSlots, keep_alive: Any,
               grad_inputs: Grads, grad_outputs: Grads) -> None:
    return _fire(pending, _node_grads, grad_inputs, grad_outputs, in_pairs, out_pairs)


def _pre_fire(pending: PendingBackward, out_pairs: EdgeSlots, grad_outputs: Grads) -> None:
    return _fire(pending, _node_grads, (), grad_outputs, (), out_pairs)


def _identity_fire(pending: PendingBackward, items: IdentityEdges, want_outputs: bool, grad_outputs: Grads) -> None:
    return _fire(pending, _identity_grads, grad_outputs, items, want_outputs)


def partial_node_hook(pending: PendingBackward, in_pairs: EdgeSlots, out_pairs: EdgeSlots, keep_alive: Any = None
                      ) -> Callable[[Grads, Grads], None]:
    return partial(_node_fire, pending, in_pairs, out_pairs, keep_alive)


def partial_pre_hook(pending: PendingBackward, out_pairs: EdgeSlots) -> Callable[[Grads], None]:
    return partial(_pre_fire, pending, out_pairs)


def partial_identity_hook(pending: PendingBackward, items: IdentityEdges, want_outputs: bool
                          ) -> Callable[[Grads], None]:
    return partial(_identity_fire, pending, items, want_outputs)


class HookMakers(NamedTuple):
    """How ``install_hooks`` and ``install_identity_hooks`` make their hooks."""
    node: Callable[..., Callable[[Grads, Grads], None]]
    pre: Callable[..., Callable[[Grads], None]]
    identity: Callable[..., Callable[[Grads], None]]


CLOSURE_HOOKS = HookMakers(node_hook, pre_hook, identity_hook)  # plain functions (a framework may ask for them)
PARTIAL_HOOKS = HookMakers(partial_node_hook, partial_pre_hook, partial_identity_hook)

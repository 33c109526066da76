"""Backward records from MindSpore's PyNative autograd graph: hooks on the nodes one call created, nothing inserted.

MindSpore 2.10 exposes the graph it records under ``value_and_grad`` / ``grad``: ``tensor._grad_node`` is a
``BackwardNode`` with ``next_functions``, ``_sequence_nr()``, ``register_prehook(hook(grad_outputs))`` and
``register_hook(hook(grad_inputs, grad_outputs))``. For a call (an API or a cell) we know its input edges (each
input's node and output index, taken before the call) and its outputs. Walking back from the output nodes through
the nodes the call created (sequence number at or after the call's first) finds the boundary edges, the ones
leaving the call for one of its inputs; a hook on each boundary node receives the gradient along that edge, which
summed per input is the gradient w.r.t. that input from this call. A pre-hook on each output node gives the
gradient w.r.t. each output. Most ops create one node: one hook gives both sides. The bookkeeping, the walk and
the hooks are framework-neutral (``engines.capture.backward``, shared with PyTorch); here: MindSpore's nodes.

Nothing is wrapped and no identity op is added (MindSpore's own ``Cell.register_backward_hook`` inserts one):
gradients are unchanged with capture on (docs/decisions/0010-capture-does-not-change-numbers.md). Leaf nodes are fresh Python objects on every access, so
they are matched by ``_unique_id()``; their sequence number is the maximum of uint64.
"""

from typing import Any, Dict, List, Optional, Tuple

from engines.capture.backward import (
    NodePairs,
    PendingBackward,
    find_boundary,
    install_hooks,
    install_identity_hooks,
)

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


def _key(node: Any) -> int:
    return node._unique_id()


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


def attach(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, Any]],
           want_inputs: bool, want_outputs: bool) -> bool:
    """Register the hooks for one call; False when there is nothing to observe."""
    seq_before = sequence_mark(input_edges)
    out_nodes: NodePairs = {}
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

    single, boundary = find_boundary(out_nodes, match_all, _key, lambda node: node.is_leaf() or _seq(node) < seq_before)
    return install_hooks(pending, out_nodes, boundary, single, single._unique_id() if single is not None else None,
                         want_inputs, want_outputs)


def _attach_identity(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, Any]],
                     want_inputs: bool, want_outputs: bool) -> bool:
    """A call that created no node (``engines.capture.backward.install_identity_hooks``)."""
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
    return install_identity_hooks(pending, nodes, want_outputs)

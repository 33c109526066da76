"""Backward records by observing torch's autograd graph: hooks on the nodes one call created, nothing inserted.

For a call (an API or a module) we know, from the forward pass, its input edges (each input's ``grad_fn`` and
``output_nr``, or the leaf itself) and its outputs. The nodes the call created are those with a sequence number
at or after the one taken before the call. Walking back from the outputs through those nodes finds the *boundary*
edges, the ones that leave the call for one of its inputs; a hook on each boundary node receives the gradient
flowing along each such edge, which summed per input is exactly the gradient w.r.t. that input from this call.
A pre-hook on each output node gives the gradient w.r.t. each output. Most ops create a single node whose edges
are all boundary edges: one hook gives both sides. The bookkeeping and the hooks are framework-neutral
(``engines.capture.backward``); here: torch's nodes, its sequence counter, leaves as ``AccumulateGrad`` nodes, and
the frontier memo that lets a parent module's walk skip its children.

Nothing is wrapped and no identity node is added, so gradients and their accumulation order are unchanged:
capture on or off, the numbers are bit-identical (docs/decisions/0010-capture-does-not-change-numbers.md). In-place ops work because input edges are taken
before the call runs.
"""

from typing import Any, Dict, List, Optional, Tuple

import torch

from engines.capture.backward import (
    MAX_WALK_NODES,
    PARTIAL_HOOKS,
    NodePairs,
    PendingBackward,
    install_hooks,
    install_identity_hooks,
)

_get_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)

InputEdge = Tuple[str, Any, int, Optional[torch.Tensor]]  # (slot, grad_fn or None, output_nr, leaf tensor or None)
_ByNode = Dict[int, Dict[int, List[str]]]  # id(grad_fn) -> output_nr -> the input slots that edge reaches


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


def attach(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, torch.Tensor]],
           seq_before: int, want_inputs: bool, want_outputs: bool, memo: Optional[Dict[int, Any]] = None) -> bool:
    """Register the hooks for one call. ``want_inputs``: gradients w.r.t. the call's inputs (the backward
    record's ``output.*`` slots); ``want_outputs``: w.r.t. its outputs (``input.*``). False when there is
    nothing to observe."""
    out_nodes: NodePairs = {}
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
    by_node: _ByNode = {}  # id(grad_fn) -> output_nr -> slots: an edge to no input costs one lookup
    by_leaf: Dict[int, List[str]] = {}
    keep_alive = []
    for slot, fn, nr, leaf in input_edges:
        if leaf is not None:
            by_leaf.setdefault(id(leaf), []).append(slot)
            keep_alive.append(leaf)
        else:
            by_node.setdefault(id(fn), {}).setdefault(nr, []).append(slot)
            keep_alive.append(fn)

    single, boundary = _find_boundary(out_nodes, by_node, by_leaf, seq_before, memo)
    return install_hooks(pending, out_nodes, boundary, single, id(single), want_inputs, want_outputs, keep_alive,
                         PARTIAL_HOOKS)


def _find_boundary(out_nodes: NodePairs, by_node: "_ByNode", by_leaf: Dict[int, List[str]], seq_before: int,
                   memo: Optional[Dict[int, Any]]) -> Tuple[Any, NodePairs]:
    """``engines.capture.backward.find_boundary`` for torch's nodes, with the edge matching (an ``AccumulateGrad``
    holding an input leaf, else ``(id of node, output_nr)``), the node key (``id``) and the test for nodes outside
    the call (a leaf, or a sequence number before ``seq_before``) written inline: the same boundary, in the same
    order, and the same memo, without the three Python calls an edge that the neutral walk makes."""
    accumulate = _ACCUMULATE
    boundary: NodePairs = {}
    single = None
    one_out = len(out_nodes) == 1
    if one_out:
        # ``single_node_edges``: the call is one node when every edge of its output node reaches an input
        (node, _), = out_nodes.values()
        matched: Optional[List[Tuple[int, str]]] = []
        used: Dict[int, int] = {}
        for k, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            if type(nxt) is accumulate:
                var = getattr(nxt, "variable", None)
                slots = by_leaf.get(id(var)) if var is not None else None
            else:
                per_nr = by_node.get(id(nxt))
                slots = per_nr.get(nr) if per_nr is not None else None
            if not slots:
                matched = None
                break
            # Edges follow the op's tensor arguments in order: the i-th edge to a repeated tensor is its i-th slot.
            i = used.get(id(slots), 0)
            used[id(slots)] = i + 1
            matched.append((k, slots[min(i, len(slots) - 1)]))  # type: ignore[union-attr]
        if matched is not None:
            single = node
            if matched:
                boundary[id(node)] = (node, matched)
    frontier: Optional[List[Tuple[Any, int, Any, int]]] = [] if memo is not None and one_out else None
    if single is not None:
        if frontier is not None:
            frontier.extend((single, k, nxt, nr) for k, (nxt, nr) in enumerate(single.next_functions)
                            if nxt is not None)
        complete = True
    else:
        complete = _walk_boundary(out_nodes, by_node, by_leaf, seq_before, boundary, memo, frontier)
    if memo is not None and frontier is not None and complete:
        # A parent module's walk jumps from this call's output node straight to the edges that leave it.
        (node, _), = out_nodes.values()
        memo[id(node)] = (node, frontier)
    return single, boundary


def _walk_boundary(out_nodes: NodePairs, by_node: "_ByNode", by_leaf: Dict[int, List[str]], seq_before: int,
                   boundary: NodePairs, memo: Optional[Dict[int, Any]],
                   frontier: Optional[List[Tuple[Any, int, Any, int]]]) -> bool:
    """``engines.capture.backward.walk_boundary`` with torch's matching, key and outside test inline, and a node's
    own edges read straight from ``next_functions`` (no list of tuples made a node): the same boundary, frontier
    and order."""
    accumulate = _ACCUMULATE
    stack = [fn for fn, _ in out_nodes.values()]
    seen = set(id(fn) for fn in stack)
    visited = 0
    limit = MAX_WALK_NODES
    while stack:
        if visited >= limit:
            return False
        node = stack.pop()
        visited += 1
        cached = memo.get(id(node)) if memo else None
        if cached is not None and cached[0] is node:
            # a child call's frontier: the edges that leave it, each from the node inside it they start at
            for src, k, nxt, nr in cached[1]:
                is_leaf = type(nxt) is accumulate
                if is_leaf:
                    var = getattr(nxt, "variable", None)
                    slots = by_leaf.get(id(var)) if var is not None else None
                else:
                    per_nr = by_node.get(id(nxt))
                    slots = per_nr.get(nr) if per_nr is not None else None
                if slots:
                    entry = boundary.get(id(src))
                    if entry is None:
                        entry = boundary[id(src)] = (src, [])
                    entry[1].append((k, slots[0]))
                    if frontier is not None:
                        frontier.append((src, k, nxt, nr))
                    continue
                nxt_key = id(nxt)
                if nxt_key in seen:
                    continue
                if is_leaf or nxt._sequence_nr() < seq_before:
                    if frontier is not None:
                        frontier.append((src, k, nxt, nr))
                    continue
                seen.add(nxt_key)
                stack.append(nxt)
            continue
        k = -1
        for nxt, nr in node.next_functions:  # the same body, ``src`` being ``node``
            k += 1
            if nxt is None:
                continue
            is_leaf = type(nxt) is accumulate
            if is_leaf:
                var = getattr(nxt, "variable", None)
                slots = by_leaf.get(id(var)) if var is not None else None
            else:
                per_nr = by_node.get(id(nxt))
                slots = per_nr.get(nr) if per_nr is not None else None
            if slots:
                entry = boundary.get(id(node))
                if entry is None:
                    entry = boundary[id(node)] = (node, [])
                entry[1].append((k, slots[0]))
                if frontier is not None:
                    frontier.append((node, k, nxt, nr))
                continue
            nxt_key = id(nxt)
            if nxt_key in seen:
                continue
            if is_leaf or nxt._sequence_nr() < seq_before:
                if frontier is not None:
                    frontier.append((node, k, nxt, nr))
                continue
            seen.add(nxt_key)
            stack.append(nxt)
    return True


def _attach_identity(pending: PendingBackward, input_edges: List[InputEdge], outputs: List[Tuple[str, torch.Tensor]],
                     want_inputs: bool, want_outputs: bool) -> bool:
    """A call that created no node (``engines.capture.backward.install_identity_hooks``)."""
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
    return install_identity_hooks(pending, nodes, want_outputs, PARTIAL_HOOKS)


def _fallback_mark(input_edges: List[InputEdge]) -> int:
    """Without torch's sequence counter: nodes newer than every input's node belong to the call."""
    best = -1
    for _, fn, _, _ in input_edges:
        if fn is not None:
            best = max(best, fn._sequence_nr())
    return best + 1

"""torch's boundary walk (engines/adapters/torch/backward_capture.py) written inline gives what the framework-neutral
walk (engines/capture/backward.py: find_boundary, with the matching, key and outside test as callbacks) gives: the
same single node, the same boundary edges in the same order, the same frontier memo, and the same cut-short walk."""

import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn.functional as F

from engines.adapters.torch import backward_capture as bc
from engines.capture import backward as neutral


def _neutral(out_nodes: Any, edges: List[Any], seq: int, memo: Optional[Dict[int, Any]]) -> Tuple[Any, Any]:
    """The walk as attach made it before it was written inline for torch."""
    by_node: Dict[Tuple[int, int], List[str]] = {}
    by_leaf: Dict[int, List[str]] = {}
    for slot, fn, nr, leaf in edges:
        if leaf is not None:
            by_leaf.setdefault(id(leaf), []).append(slot)
        else:
            by_node.setdefault((id(fn), nr), []).append(slot)
    acc = bc._ACCUMULATE

    def match_all(node: Any, nr: int) -> Optional[List[str]]:
        if type(node) is acc:
            var = getattr(node, "variable", None)
            return by_leaf.get(id(var)) if var is not None else None
        return by_node.get((id(node), nr))

    return neutral.find_boundary(out_nodes, match_all, id,
                                 lambda node: type(node) is acc or node._sequence_nr() < seq, memo)


def _inline(out_nodes: Any, edges: List[Any], seq: int, memo: Optional[Dict[int, Any]]) -> Tuple[Any, Any]:
    by_node: Dict[int, Dict[int, List[str]]] = {}
    by_leaf: Dict[int, List[str]] = {}
    for slot, fn, nr, leaf in edges:
        if leaf is not None:
            by_leaf.setdefault(id(leaf), []).append(slot)
        else:
            by_node.setdefault(id(fn), {}).setdefault(nr, []).append(slot)
    return bc._find_boundary(out_nodes, by_node, by_leaf, seq, memo)


def _call(fn: Callable[..., Any], *inputs: torch.Tensor) -> Tuple[Any, List[Any], int]:
    """(output nodes, input edges, sequence mark) of one call, as attach sees them."""
    edges = [e for e in (bc.input_edge("input.%d" % i, t) for i, t in enumerate(inputs)) if e is not None]
    seq = bc.sequence_mark()
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    if outs[0].grad_fn is not None:
        _OUTPUTS[id(outs[0].grad_fn)] = outs[0]
    out_nodes: Dict[int, Tuple[Any, List[Tuple[int, str]]]] = {}
    for i, t in enumerate(outs):
        if t.grad_fn is not None and t.grad_fn._sequence_nr() >= seq:
            out_nodes.setdefault(id(t.grad_fn), (t.grad_fn, []))[1].append((t.output_nr, "output.%d" % i))
    return out_nodes, edges, seq


def _same(a: Tuple[Any, Any], b: Tuple[Any, Any]) -> None:
    assert a[0] is b[0]
    assert list(a[1]) == list(b[1])
    for key in a[1]:
        assert a[1][key][0] is b[1][key][0] and a[1][key][1] == b[1][key][1]


def _same_memo(a: Dict[int, Any], b: Dict[int, Any]) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key][0] is b[key][0]
        assert [(s is s2, k, n is n2, nr) for (s, k, n, nr), (s2, _, n2, _) in zip(a[key][1], b[key][1])] == \
            [(True, k, True, nr) for _, k, _, nr in a[key][1]]


CASES = {
    "linear 3-d": lambda: (lambda lin, x: _call(lin, x))(torch.nn.Linear(4, 6), torch.randn(2, 3, 4) * 1.0),
    "x * x": lambda: (lambda x: _call(lambda a: a * a, x))(torch.randn(3, requires_grad=True) * 2),
    "leaf input": lambda: _call(lambda a: a.exp().sum(), torch.randn(3, requires_grad=True)),
    "two outputs": lambda: _call(lambda a: a.chunk(2), torch.randn(4, requires_grad=True) * 2),
    "layer norm": lambda: (lambda ln, x: _call(ln, x))(torch.nn.LayerNorm(4), torch.randn(2, 4, requires_grad=True) + 1),
    "in place": lambda: _call(lambda a: a.mul_(2).add_(1), torch.randn(3, requires_grad=True) * 1.5),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("with_memo", [False, True])
def test_inline_walk_equals_the_neutral_walk(case, with_memo):
    torch.manual_seed(0)
    out_nodes, edges, seq = CASES[case]()
    memo_a: Optional[Dict[int, Any]] = {} if with_memo else None
    memo_b: Optional[Dict[int, Any]] = {} if with_memo else None
    _same(_neutral(out_nodes, edges, seq, memo_a), _inline(out_nodes, edges, seq, memo_b))
    if with_memo:
        _same_memo(memo_a, memo_b)  # type: ignore[arg-type]


def test_inline_walk_equals_the_neutral_walk_through_child_frontiers(monkeypatch):
    """A parent's walk jumps through its children's memoised frontiers (qkv, proj): the same boundary and memo;
    cut short by the node limit, both give up alike (the memo keeps the child's frontier)."""
    torch.manual_seed(0)
    qkv, proj = torch.nn.Linear(4, 12), torch.nn.Linear(4, 4)
    x = torch.randn(2, 3, 4, requires_grad=True) * 1.0
    calls = []  # (output nodes, input edges, mark) of qkv, proj, then the parent, in the order they returned
    parent_edges, parent_seq = [bc.input_edge("input.0", x)], bc.sequence_mark()
    b, t, c = x.shape
    nodes, edges, seq = _call(qkv, x)
    calls.append((nodes, edges, seq))
    y = next(iter(nodes.values()))[0]
    q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in _last_output(qkv, x, y).split(c, dim=2))
    probs = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(c // 2), dim=-1)
    h = (probs @ v).transpose(1, 2).contiguous().view(b, t, c)
    edges = [bc.input_edge("input.0", h)]
    seq = bc.sequence_mark()
    out = proj(h)
    calls.append(({id(out.grad_fn): (out.grad_fn, [(0, "output.0")])}, edges, seq))
    calls.append(({id(out.grad_fn): (out.grad_fn, [(0, "output.0")])}, parent_edges, parent_seq))
    for limit in (neutral.MAX_WALK_NODES, 5):  # each Linear walks 4 nodes, the parent more
        monkeypatch.setattr(neutral, "MAX_WALK_NODES", limit)
        monkeypatch.setattr(bc, "MAX_WALK_NODES", limit)
        memo_a: Dict[int, Any] = {}
        memo_b: Dict[int, Any] = {}
        for nodes, edges, seq in calls:
            _same(_neutral(nodes, edges, seq, memo_a), _inline(nodes, edges, seq, memo_b))
        _same_memo(memo_a, memo_b)
        # proj's output node is the parent's: the parent's complete walk leaves its frontier (to x) there
        frontier = memo_a[id(out.grad_fn)][1]
        assert any(n is x.grad_fn for _, _, n, _ in frontier) == (limit > 5)


_OUTPUTS: Dict[int, torch.Tensor] = {}


def _last_output(lin: torch.nn.Linear, x: torch.Tensor, node: Any) -> torch.Tensor:
    return _OUTPUTS[id(node)]

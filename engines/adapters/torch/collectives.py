"""What a collective call is, for its record's ``args["collective"]`` (docs/FORMAT.md), and the per-group count
that links the same collective across ranks.

The function mode hands every ``Distributed.*`` call it sees (``torch.distributed`` functions and the functional
collectives ``torch.ops._c10d_functional*`` that DTensor issues) to ``CollectiveTracker.note``, recorded or not, so
``group_seq`` (the 0-based number of collectives this rank issued on that process group so far) is the same
number on every member of the group for the same collective. Nothing here talks to other ranks: the group's
ranks come from the process-group registry (``get_process_group_ranks``), never from a collective of our own.

A point-to-point call (send/recv/isend/irecv, each op of ``batch_isend_irecv``) also gets ``p2p_seq``: the number
of messages this rank sent to (or received from) that peer on that group so far, which pairs a send with its
recv. The tracker also keeps the order of the collectives of the current step, so a record can tell how many
collectives of each group its rank had issued when it ran (``clock``), the link the cross-rank analyses follow.
"""

import inspect
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch

# Calls of the Distributed namespace that are collectives, by the name the API table gives them.
REDUCING = frozenset(("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_", "reduce",
                      "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced",
                      "_reduce_scatter_base", "reduce_scatter_single"))
COLLECTIVES = REDUCING | frozenset((
    "all_gather", "all_gather_into_tensor", "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced",
    "all_gather_coalesced", "_all_gather_base", "all_gather_single", "broadcast", "broadcast_", "gather", "scatter", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "batch_p2p_ops"))
SENDS = frozenset(("send", "isend"))
RECVS = frozenset(("recv", "irecv"))
ASYNC_ALWAYS = frozenset(("isend", "irecv", "batch_isend_irecv"))

# The argument that holds what this rank sends (or holds), first match wins.
MAX_ORDER = 1 << 20  # collectives remembered in order within one step

PAYLOAD_ARGS = ("input_tensor", "input", "inputs", "input_tensor_list", "input_list", "tensor", "tensors", "self")


def _tensors(value: Any, out: List[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)


def payload(bound: Dict[str, Any]) -> Tuple[Optional[str], int]:
    """(dtype text of the first tensor, bytes of all tensors) of the payload argument."""
    for name in PAYLOAD_ARGS:
        if name in bound:
            found: List[torch.Tensor] = []
            _tensors(bound[name], found)
            if found:
                return str(found[0].dtype), sum(int(t.numel()) * int(t.element_size()) for t in found)
    return None, 0


def reduce_op_text(value: Any) -> Optional[str]:
    """``ReduceOp.SUM`` / ``RedOpType.SUM`` / ``"sum"`` -> ``"sum"``."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.lower()
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name.lower()
    text = str(value)
    return text.rsplit(".", 1)[-1].split(":")[0].strip("<> ").lower()


class GroupInfo:
    __slots__ = ("key", "ranks")

    def __init__(self, key: str, ranks: List[int]) -> None:
        self.key = key
        self.ranks = ranks


class CollectiveTracker:
    """Per-process counts of collectives per group (``group_seq``) and per peer (``p2p_seq``); see the module
    docstring."""

    def __init__(self) -> None:
        self.seq: Dict[str, int] = {}
        self.p2p: Dict[Tuple[str, str, int], int] = {}
        self._groups: Dict[Optional[str], GroupInfo] = {}  # by group name (None: the default group)
        # by process group: id -> (weak reference, info). Never the group itself: a reference held here kept a
        # gloo group's threads running after the script's ``destroy_process_group`` until the interpreter's exit
        self._by_pg: Dict[int, Tuple[Any, GroupInfo]] = {}
        self._signatures: Dict[Any, Any] = {}
        self.base: Dict[str, int] = {}  # counts when the current step's order began
        self.base_total = 0
        self.order: List[str] = []  # group keys of this step's collectives, in issue order

    # -- the clock -------------------------------------------------------------------------------------------
    def mark(self) -> int:
        """How many collectives this rank has issued so far (all groups): a record's place among them."""
        return self.base_total + len(self.order)

    def clock(self, mark: int) -> Dict[str, int]:
        """Collectives issued per group before ``mark`` (the step's marks; an older mark gives the step start)."""
        out = dict(self.base)
        for key in self.order[:max(0, mark - self.base_total)]:
            out[key] = out.get(key, 0) + 1
        return out

    def rebase(self) -> None:
        """A step ended: forget its order (the counts stay)."""
        self.base = dict(self.seq)
        self.base_total += len(self.order)
        self.order = []

    # -- groups ----------------------------------------------------------------------------------------------
    def group(self, pg: Any = None, name: Optional[str] = None) -> GroupInfo:
        """Key and global ranks of a process group (the default group for None), from the registry only."""
        by_pg = name is None and pg is not None
        if by_pg:
            held = self._by_pg.get(id(pg))
            if held is not None and held[0]() is pg:
                return held[1]
        else:
            got = self._groups.get(name)
            if got is not None:
                return got
        import torch.distributed as dist

        if name is not None:
            from torch.distributed.distributed_c10d import _resolve_process_group

            pg = _resolve_process_group(name)
        if pg is None:
            pg = dist.group.WORLD
        ranks = [int(r) for r in dist.get_process_group_ranks(pg)]
        key = str(getattr(pg, "group_name", "") or name or ",".join(map(str, ranks)))
        info = GroupInfo(key, ranks)
        if not by_pg:
            self._groups[name] = info
        else:
            try:
                self._by_pg[id(pg)] = (weakref.ref(pg), info)
            except TypeError:  # a group that takes no weak reference is looked up each time
                pass
        return info

    # -- one call --------------------------------------------------------------------------------------------
    def bind(self, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
        """(arguments by name, with the defaults of those not passed; whether it is a functional ``torch.ops``
        collective). Parameter names are read once per callable (from the schema or the Python signature)."""
        sig = self._signatures.get(func)
        if sig is None:
            sig = self._signatures[func] = _parameters(func)
        positional, defaults, functional = sig
        bound = dict(defaults)
        bound.update(zip(positional, args))
        bound.update(kwargs)
        return bound, functional

    def note(self, api: str, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The ``collective`` dict of one call (None: not a collective); counts it."""
        if api not in COLLECTIVES:
            return None
        bound, functional = self.bind(func, args, kwargs)
        op = api.rstrip("_") if api not in ("_all_gather_base", "_reduce_scatter_base") else api
        if api == "batch_isend_irecv":
            return self._batch(bound.get("p2p_op_list") or [])
        if functional:
            name = bound.get("group_name")  # a name; newer schemas ("Any") also take the group itself
            group = self.group(name=name) if isinstance(name, str) else self.group(pg=name)
        else:
            group = self.group(pg=bound.get("group"))
        dtype, nbytes = payload(bound)
        src = self._peer(group, bound, "src", functional)
        dst = self._peer(group, bound, "dst", functional)
        reduce_op = None
        if api in REDUCING:
            reduce_op = reduce_op_text(bound.get("reduce_op", bound.get("op"))) or "sum"
        async_op = functional or api in ASYNC_ALWAYS or bool(bound.get("async_op", False))
        out = {"op": op, "group": group.ranks, "src": src, "dst": dst, "reduce_op": reduce_op, "dtype": dtype,
               "bytes": nbytes, "async_op": async_op, "group_seq": self._count(group.key),
               "group_name": group.key}
        if op in SENDS and dst is not None:
            out["p2p_seq"] = self._p2p(group.key, "send", dst)
        elif op in RECVS and src is not None:
            out["p2p_seq"] = self._p2p(group.key, "recv", src)
        return out

    def _count(self, key: str) -> int:
        n = self.seq.get(key, 0)
        self.seq[key] = n + 1
        self.order.append(key)
        if len(self.order) >= MAX_ORDER:  # a run without step ends: bounded (older marks read the step start)
            self.rebase()
        return n

    def _p2p(self, key: str, direction: str, peer: int) -> int:
        k = (key, direction, peer)
        n = self.p2p.get(k, 0)
        self.p2p[k] = n + 1
        return n

    def _peer(self, group: GroupInfo, bound: Dict[str, Any], which: str, functional: bool) -> Optional[int]:
        """A global rank from ``src``/``dst`` (global in torch.distributed, group-local in the functional ops and
        in ``group_src``/``group_dst``)."""
        value = bound.get(which)
        if value is not None and not functional:
            return int(value)
        local = value if functional else bound.get("group_" + which)
        if local is None:
            return None
        local = int(local)
        return group.ranks[local] if 0 <= local < len(group.ranks) else None

    def _batch(self, ops: List[Any]) -> Dict[str, Any]:
        """``batch_isend_irecv``: one record, its messages listed (each with its peer and ``p2p_seq``)."""
        messages = []
        dtype = None
        total = 0
        group: Optional[GroupInfo] = None
        for p in ops:
            g = self.group(pg=getattr(p, "group", None))
            group = group or g
            kind = getattr(getattr(p, "op", None), "__name__", "")
            t = getattr(p, "tensor", None)
            peer = getattr(p, "peer", None)
            if peer is None and getattr(p, "group_peer", None) is not None:
                peer = g.ranks[int(p.group_peer)]
            n = int(t.numel()) * int(t.element_size()) if isinstance(t, torch.Tensor) else 0
            dtype = dtype or (str(t.dtype) if isinstance(t, torch.Tensor) else None)
            total += n
            direction = "send" if kind in SENDS else "recv"
            msg = {"op": kind, "peer": peer, "bytes": n}
            if peer is not None:
                msg["p2p_seq"] = self._p2p(g.key, direction, int(peer))
            messages.append(msg)
        if group is None:
            group = self.group()
        return {"op": "batch_isend_irecv", "group": group.ranks, "src": None, "dst": None, "reduce_op": None,
                "dtype": dtype, "bytes": total, "async_op": True, "group_seq": self._count(group.key),
                "group_name": group.key, "messages": messages}


def _parameters(func: Any) -> Tuple[List[str], Dict[str, Any], bool]:
    """(positional parameter names, keyword defaults, functional) of a collective callable."""
    if is_functional(func):
        op = func if isinstance(func, torch._ops.OpOverload) else getattr(func, "default", None)
        if op is None:
            op = getattr(func, func.overloads()[0])
        return [a.name for a in op._schema.arguments if not a.kwarg_only], {}, True
    params = inspect.signature(inspect.unwrap(func)).parameters.values()
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    return positional, defaults, False


def wait_functional(out: Any) -> Any:
    """Wait for a functional collective's result (``wait_tensor``), so the recorded values are the real ones.

    Training's own later wait finds nothing left to wait for; the values it sees are the same."""
    wait = torch.ops._c10d_functional.wait_tensor
    for t in out if isinstance(out, (list, tuple)) else (out,):
        if isinstance(t, torch.Tensor) and type(t) is torch.Tensor:
            wait(t)
    return out


def is_functional(func: Any) -> bool:
    return isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))

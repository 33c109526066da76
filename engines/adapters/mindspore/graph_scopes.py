"""The cells of kernels whose full scope name lost them, from the graph's own IR dump (docs/MINDSPORE.md
"Graph mode", "Kernels MindSpore expands").

MindSpore expands some primitives into several kernels when it compiles a graph (``Dense`` into Reshape, MatMul,
Add, Reshape; ``MatMulExt``, ``Muls``, ``SumExt``, ``SoftmaxBackward``...); the new kernels are named
``Expand/_<Primitive>/<Op>-op<N>``, with no cell. The IR file MindSpore writes next to the kernel dump
(``graphs/ms_output_trace_code_graph_<g>.ir``) keeps, for every node, the source frames that created it ("code
candidate", or for backward nodes "forward node candidate"). A cell's nodes are created inside its
``construct``: the expanded kernel belongs to the cell whose ``construct`` is its innermost one, and the scoped
nodes made directly in that same call (same frames up to that ``construct``, no deeper ``construct``) name it.
Several instances of one cell met on one source path (a loop over blocks) are told apart by the node nearest to
the kernel in the IR's order (nodes are listed in the order they were built, a call's nodes together).

This module needs no MindSpore: it reads the text file.
"""

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

_SCOPE = re.compile(r"^\s*# Fullname with scope: \((?P<name>.*)\)\s*$")
_FRAME = re.compile(r"^\s*# In file (?P<frame>.*)$")
_CONSTRUCT = re.compile(r"/\s*def construct\(")
_HEADER = re.compile(r"^\s*%(?P<id>\d+)\(.*?\) = [\w.]+\((?P<args>.*)$")
_SUBGRAPH = re.compile(r"^subgraph @")
_BACKWARD_MARK = "# Corresponding forward node candidate:"
EXPAND = "Expand/"
CELL = re.compile(r"^(?P<attr>[^-]+)-(?P<cls>[A-Za-z_]\w*)$")  # a scope's cell: ``{attribute}-{Class}``
# the training wrappers' components (cell_capture drops the same ones from PyNative names)
WRAPPERS = frozenset(("network", "_backbone", "_network"))


def scope_cells(scope: str) -> List[Tuple[str, str]]:
    """(attribute, class) of each cell in a full scope name, outermost first, wrappers dropped."""
    out = []
    for part in scope.split("/")[:-1]:
        m = CELL.match(part)
        if m and m.group("attr") not in WRAPPERS:
            out.append((m.group("attr"), m.group("cls")))
    return out


@dataclass
class IrNode:
    name: str  # the full scope name, '/'-separated, the op last
    position: int  # order in the IR file
    backward: bool  # its frames are its forward node's
    frames: Tuple[str, ...]  # outermost first
    node_id: str = ""  # "<subgraph>:%<n>", the IR's value name
    operands: Tuple[str, ...] = ()  # the node_ids it reads


def _is_construct(frame: str) -> bool:
    # frames are "<file>:<lines>, <cols>/<source>/": a cell's entry is its construct's def line
    return _CONSTRUCT.search(frame) is not None


def read_ir(path: str) -> List[IrNode]:
    """Every node of an IR dump that has a full scope name, with the frames listed under it."""
    nodes: List[IrNode] = []
    current: Optional[IrNode] = None
    frames: List[str] = []
    subgraph = 0
    header: Tuple[str, Tuple[str, ...]] = ("", ())

    def flush() -> None:
        if current is not None:
            current.frames = tuple(frames)
            nodes.append(current)

    with open(path, errors="replace") as f:
        for line in f:
            if _SUBGRAPH.match(line):
                subgraph += 1
            h = _HEADER.match(line)
            if h:
                flush()
                current, frames = None, []
                header = ("%d:%s" % (subgraph, h.group("id")),
                          tuple("%d:%s" % (subgraph, a) for a in re.findall(r"%(\d+)", h.group("args"))))
                continue
            m = _SCOPE.match(line)
            if m:
                flush()
                current, frames = IrNode(m.group("name"), len(nodes), False, (), *header), []
                header = ("", ())
                continue
            if current is None:
                continue
            if line.strip() == _BACKWARD_MARK:
                current.backward = True
                continue
            fm = _FRAME.match(line)
            if fm:
                frames.append(fm.group("frame"))
            elif not line.lstrip().startswith(("#", ":")):
                flush()
                current, frames = None, []
    flush()
    return nodes


def _innermost_construct(frames: Tuple[str, ...]) -> int:
    for i in range(len(frames) - 1, -1, -1):
        if _is_construct(frames[i]):
            return i
    return -1


def _cell_dir(name: str) -> str:
    """The scope without its op (``Default/.../qkv-Linear/Load-op0`` -> ``Default/.../qkv-Linear``)."""
    return name.rsplit("/", 1)[0] if "/" in name else ""


def expanded_scopes(nodes: List[IrNode]) -> Dict[str, str]:
    """``Expand/...`` full name -> the same name under its cell's scope (``<cell scope>/Expand/_Dense/MatMul-op0``;
    backward kernels under ``Gradients/``) for every expanded node the frames place; the others are left out."""
    scoped = [n for n in nodes if not n.name.startswith(EXPAND) and n.name.startswith(("Default", "Gradients"))]
    # (backward, frames up to the innermost construct) -> the scoped nodes made directly in that call
    calls: Dict[Tuple[bool, Tuple[str, ...]], List[IrNode]] = {}
    for n in scoped:
        k = _innermost_construct(n.frames)
        if k >= 0:
            calls.setdefault((n.backward or n.name.startswith("Gradients"), n.frames[:k + 1]), []).append(n)
    out: Dict[str, str] = {}
    by_id = {n.node_id: n for n in nodes if n.node_id}
    for n in nodes:
        if not n.name.startswith(EXPAND):
            continue
        if n.backward:  # a backward node's frames are a forward candidate's: what it reads is surer
            read = {_cell_dir(by_id[a].name) for a in n.operands
                    if a in by_id and by_id[a].name.startswith("Gradients")}
            if len(read) == 1:
                out[n.name] = read.pop() + "/" + n.name
                continue
        k = _innermost_construct(n.frames)
        candidates = calls.get((n.backward, n.frames[:k + 1])) if k >= 0 else None
        if not candidates:
            continue
        nearest = min(candidates, key=lambda c: abs(c.position - n.position))
        cell = _cell_dir(nearest.name)
        if n.backward and not cell.startswith("Gradients"):
            cell = "Gradients/" + cell
        if cell:
            out[n.name] = cell + "/" + n.name
    _by_operands(nodes, out)
    return out


def _expansion(n: IrNode) -> Tuple[str, bool, Tuple[str, ...]]:
    """What tells one expansion's kernels apart from others': its primitive, direction and frames."""
    return n.name.split("/")[1] if n.name.count("/") >= 2 else "", n.backward, n.frames


def _by_operands(nodes: List[IrNode], out: Dict[str, str]) -> None:
    """Expanded nodes the frames could not place (no scoped node of the call has frames: a ``Linear`` whose only
    own nodes are its parameters' ``Load``): the scoped nodes they read (a parameter's ``Load`` is scoped in the
    cell that reads it), then the other kernels of the same expansion they feed or read."""
    by_id = {n.node_id: n for n in nodes if n.node_id}
    for n in nodes:
        if not n.name.startswith(EXPAND) or n.name in out:
            continue
        loads = {_cell_dir(by_id[a].name) for a in n.operands
                 if a in by_id and by_id[a].name.startswith("Default") and "/Load-op" in by_id[a].name}
        if len(loads) == 1:
            out[n.name] = loads.pop() + "/" + n.name
    changed = True
    while changed:  # along the edges between kernels of one expansion
        changed = False
        for n in nodes:
            for a in n.operands:
                m = by_id.get(a)
                if m is None or not (n.name.startswith(EXPAND) and m.name.startswith(EXPAND)):
                    continue
                if _expansion(n) != _expansion(m) or (n.name in out) == (m.name in out):
                    continue
                placed, other = (n, m) if n.name in out else (m, n)
                out[other.name] = out[placed.name][: -len(placed.name)] + other.name
                changed = True


def graph_scopes(rank_dir: str, graph: int) -> Dict[str, str]:
    """:func:`expanded_scopes` of graph ``graph``'s IR dump under ``rank_dir`` (empty when there is none or it
    cannot be read)."""
    path = os.path.join(rank_dir, "graphs", "ms_output_trace_code_graph_%d.ir" % graph)
    try:
        return expanded_scopes(read_ir(path)) if os.path.isfile(path) else {}
    except (OSError, ValueError):
        return {}


_PARAM = re.compile(r"^%para(?P<n>\d+)_.*?ref_key=(?P<key>[^,>\s]+), is_parameter")
_LOAD = re.compile(r"^\s*%\d+\(.*?\) = Load\(%para(?P<n>\d+)_")
_FRAME_AT = re.compile(r"^(?P<file>.+?):(?P<line>\d+)")
_CLASS = re.compile(r"^\s*class\s+(?P<cls>[A-Za-z_]\w*)")


def _local_path(scope: str) -> str:
    """The cells of a scope below the graph's top cell, dotted (``Default/fc1-Linear/Load-op0`` -> ``fc1``)."""
    return ".".join(attr for attr, _cls in scope_cells(scope))


def _prefix(param: str, local: str) -> Optional[str]:
    """The model path above the graph's top cell that the full parameter name ``param`` gives, loaded in the
    graph's cell ``local`` ("" for the top cell itself); None where the name does not end in that cell."""
    head, _dot, _leaf = param.rpartition(".")
    if not _dot:
        return None
    if not local:
        return head
    if head == local:
        return ""
    return head[: -len(local) - 1] if head.endswith("." + local) else None


def _class_at(frame: str) -> str:
    """The class whose method starts at the frame (``<file>:<line>...``): the last ``class`` line above it in
    the source file; "" where it cannot be read."""
    m = _FRAME_AT.match(frame)
    if m is None:
        return ""
    try:
        with open(m.group("file"), errors="replace") as f:
            lines = f.read().splitlines()[: int(m.group("line"))]
    except (OSError, ValueError):
        return ""
    for line in reversed(lines):
        c = _CLASS.match(line)
        if c:
            return c.group("cls")
    return ""


def graph_root(path: str) -> List[Tuple[str, str]]:
    """(attribute, class) of each cell on the model path of a ``@jit`` cell's graph (``net``, ``blocks``,
    ``1``, ``mlp``), outermost first: the graph's scopes start at the jitted cell (``Default/fc1-Linear``) while
    the parameters it loads keep their full names (``net.blocks.1.mlp.fc1.weight``), so the name minus the
    loading cell's local path gives the jitted cell's path, when every parameter loaded in a cell agrees. Empty
    for a graph of the whole model (the path is "") or where they disagree (an optimizer's update). The jitted
    cell's class is read from the source of its ``construct`` (the outermost frame of its nodes); the classes
    above it are not in the graph ("")."""
    params: Dict[str, str] = {}
    prefixes = set()
    pending: Optional[str] = None
    construct = ""
    with open(path, errors="replace") as f:
        for line in f:
            p = _PARAM.match(line)
            if p:
                params[p.group("n")] = p.group("key")
                continue
            load = _LOAD.match(line)
            if load:
                pending = params.get(load.group("n"))
                continue
            s = _SCOPE.match(line)
            if s:
                if pending is not None:
                    prefixes.add(_prefix(pending, _local_path(s.group("name"))))
                pending = None
                continue
            fm = _FRAME.match(line)
            if fm and not construct and _is_construct(fm.group("frame")):
                construct = fm.group("frame")
    if len(prefixes) != 1:
        return []
    prefix = prefixes.pop()
    if not prefix:
        return []
    attrs = prefix.split(".")
    return [(a, "") for a in attrs[:-1]] + [(attrs[-1], _class_at(construct) or "Cell")]


def jit_root(rank_dir: str, graph: int) -> List[Tuple[str, str]]:
    """:func:`graph_root` of graph ``graph``'s IR dump under ``rank_dir`` (empty when there is none)."""
    path = os.path.join(rank_dir, "graphs", "ms_output_trace_code_graph_%d.ir" % graph)
    try:
        return graph_root(path) if os.path.isfile(path) else []
    except (OSError, ValueError):
        return []

"""Reading MindSpore's e2e kernel dump of graph-mode execution (the CPU's only graph capture: docs/MINDSPORE.md
"Graph mode"): which kernels ran at each iteration, their tensors' files, and the cells they belong to.

Layout written by MindSpore 2.10 (``MINDSPORE_DUMP_CONFIG``, ``saved_data: "tensor"``)::

    <path>/rank_<r>/<net_name>/<graph>/<iteration>/<Op>.<scope>.<task>.<stream>.<ts>.<input|output>.<i>.<fmt>.<dtype>.npy
    <path>/rank_<r>/execution_order/ms_execution_order_graph_<graph>.csv   (full scope names, '/'-separated)

In a file name the scope's ``/`` are ``_``; the execution order gives the '/' form back, whose components name
the cells (``blocks-CellList/0-Block/mlp-MLP``: ``{attribute}-{Class}``); backward kernels are under
``Gradients/``. This module needs no MindSpore: it reads files.
"""

import json
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from engines.adapters.mindspore.graph_scopes import graph_scopes, scope_cells


def dump_iterations(steps: Sequence[int]) -> List[int]:
    """MindSpore iterations that hold the training steps ``steps``: each step and the next (in PyNative the
    graphs after the first count one ahead of it: ``graph_records.training_steps``)."""
    return sorted({int(s) for s in steps} | {int(s) + 1 for s in steps})


def write_config(folder: str, net_name: str = "Net", steps: Sequence[int] = ()) -> str:
    """An e2e tensor dump of every kernel into ``folder/raw``, at the iterations that hold the training steps
    ``steps`` (:func:`dump_iterations`; all when empty); returns the config's path, the value of
    ``MINDSPORE_DUMP_CONFIG`` (read when the first graph compiles, so set it before)."""
    os.makedirs(folder, exist_ok=True)
    iteration = "|".join(str(i) for i in dump_iterations(steps)) or "all"
    config = {"common_dump_settings": {"op_debug_mode": 0, "dump_mode": 0, "path": os.path.abspath(
        os.path.join(folder, "raw")), "net_name": net_name, "iteration": iteration, "saved_data": "tensor",
        "input_output": 0, "kernels": [], "support_device": list(range(8))},
        "e2e_dump_settings": {"enable": True, "trans_flag": True}}
    path = os.path.join(os.path.abspath(folder), "dump_config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


@dataclass
class KernelTensor:
    slot: str  # input.0, output.0
    path: str
    dtype: str  # MindSpore's name, from the file name (Float32)


@dataclass
class Kernel:
    op_type: str
    scope: str  # the '/' form where the execution order knows it, else the file's '_' form
    first_ts: int
    tensors: List[KernelTensor] = field(default_factory=list)
    dumped_as: str = ""  # the file's '_' scope where ``scope`` is not its '/' form (a kernel placed in its cell)
    # (attribute, class) of the model path above the graph's top cell: a ``@jit`` cell's (graph_scopes.jit_root)
    root: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def backward(self) -> bool:
        return self.scope.startswith("Gradients")

    @property
    def args(self) -> Dict[str, str]:
        """The record's ``args``: the scope, and the name the dump gave it where that differs."""
        return {"scope": self.scope, "dumped_as": self.dumped_as} if self.dumped_as else {"scope": self.scope}

    def cells(self) -> List[Tuple[str, str]]:
        """(attribute, class) of each cell in the scope, outermost first, wrappers dropped; a ``@jit`` cell's graph
        starts at that cell: its model path (``root``) comes first."""
        return list(self.root) + scope_cells(self.scope)


def parse_name(name: str) -> Optional[Tuple[str, str, int, str, str]]:
    """(op_type, scope, timestamp, slot, dtype) of a tensor file's name, None for other files."""
    parts = name.split(".")
    if len(parts) < 10 or parts[-1] != "npy" or parts[-5] not in ("input", "output"):
        return None
    try:
        ts = int(parts[-6])
        index = int(parts[-4])
    except ValueError:
        return None
    head = parts[:-8]  # <Op>.<scope> (a scope may hold dots)
    return head[0], ".".join(head[1:]), ts, "%s.%d" % (parts[-5], index), parts[-2]


def execution_order(rank_dir: str, graph: Optional[int] = None) -> Dict[str, str]:
    """'_' form -> '/' form of every kernel's full scope name, from the execution-order files (graph ``graph``'s
    alone when given)."""
    names: Dict[str, str] = {}
    folder = os.path.join(rank_dir, "execution_order")
    if not os.path.isdir(folder):
        return names
    for fname in sorted(os.listdir(folder)):
        if not fname.startswith("ms_execution_order_graph_"):
            continue
        if graph is not None and fname != "ms_execution_order_graph_%d.csv" % graph:
            continue
        with open(os.path.join(folder, fname)) as f:
            for line in f.read().splitlines()[1:]:
                if line.strip():
                    names[line.strip().replace("/", "_")] = line.strip()
    return names


def iterations(raw: str) -> Iterator[Tuple[int, int, int, str]]:
    """(rank, graph, iteration, folder) of every dumped iteration, by rank, iteration, graph."""
    found: List[Tuple[int, int, int, str]] = []
    for rank_name in sorted(os.listdir(raw)) if os.path.isdir(raw) else []:
        if not rank_name.startswith("rank_"):
            continue
        rank_dir = os.path.join(raw, rank_name)
        for net in sorted(os.listdir(rank_dir)):
            net_dir = os.path.join(rank_dir, net)
            if net in ("execution_order", "graphs") or net.startswith(".") or not os.path.isdir(net_dir):
                continue
            for graph in os.listdir(net_dir):
                for it in os.listdir(os.path.join(net_dir, graph)) if graph.isdigit() else []:
                    if it.isdigit():
                        found.append((int(rank_name[5:]), int(it), int(graph), os.path.join(net_dir, graph, it)))
    for rank, iteration, graph_id, folder in sorted(found):
        yield rank, graph_id, iteration, folder


def graph_scope_names(rank_dir: str, graph: int) -> Dict[str, str]:
    """'_' form -> '/' form of graph ``graph``'s kernels (:func:`execution_order`), the kernels MindSpore expanded
    (``Expand/...``, no cell) placed under their cell's scope from the graph's IR (``graph_scopes``)."""
    names = execution_order(rank_dir, graph)
    placed = graph_scopes(rank_dir, graph)
    return {key: placed.get(full, full) for key, full in names.items()}


def scope_name(name: str, scopes: Dict[str, str]) -> str:
    """The '/' form of a file's '_' scope: the execution order's, else the longest cell scope of the execution
    order that the name starts with (kernels some dumps name but the execution order lists under another
    number: ``..._dropout-Dropout_Generator-op0``), else the name as it is."""
    if name in scopes:
        return scopes[name]
    best = ""
    for full in scopes.values():
        cell = full.rsplit("/", 1)[0]
        while cell and len(cell) > len(best):
            if name.startswith(cell.replace("/", "_") + "_"):
                best = cell
                break
            cell = cell.rsplit("/", 1)[0] if "/" in cell else ""
    return best + "/" + name[len(best) + 1:] if best else name


def kernels(folder: str, scopes: Dict[str, str]) -> List[Kernel]:
    """The kernels of one iteration folder, in the order they ran (their first tensor's timestamp)."""
    by_key: Dict[Tuple[str, str], Kernel] = {}
    for fname in os.listdir(folder):
        parsed = parse_name(fname)
        if parsed is None:
            continue
        op_type, scope, ts, slot, dtype = parsed
        k = by_key.get((op_type, scope))
        if k is None:
            placed = scope_name(scope, scopes)
            k = by_key[(op_type, scope)] = Kernel(op_type, placed, ts,
                                                  dumped_as="" if placed.replace("/", "_") == scope else scope)
        k.first_ts = min(k.first_ts, ts)
        k.tensors.append(KernelTensor(slot, os.path.join(folder, fname), dtype))
    out = sorted(by_key.values(), key=lambda k: (k.first_ts, k.scope))
    for k in out:
        k.tensors.sort(key=lambda t: (t.slot.startswith("output"), int(t.slot.split(".")[1])))
    return out

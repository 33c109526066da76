"""MindSpore's e2e kernel dump of graph-mode execution (``graph_kernels``) as our dump: one record per kernel
that ran, one tensor row per input and output, statistics computed here (MindSpore's own statistic dump is
refused on the CPU), tensors stored with the tensor task.

Names follow the API records' form, with the prefix ``Kernel``: ``Kernel.{Op}.{N}.{forward|backward}``, ``N``
counting the kernels of one type and direction in the step in the order they ran; ``parent`` is the cell the
kernel's scope names, as the PyNative capture names it (``Cell.net.blocks.0.mlp.fc1.Linear.forward.0``: the
graph's top cell is the root and the training wrappers' attributes are dropped, as at L0; a ``@jit`` cell's graph
starts at that cell, so its model path, read from the parameter names its IR loads, comes first), and ``args``
holds the full scope.
The cells go into the ``modules`` table, so the model tree is the graph's construct tree.
"""

import json
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from engines.adapters.mindspore.graph_kernels import Kernel, graph_scope_names, iterations, kernels
from engines.adapters.mindspore.graph_scopes import jit_root
from engines.adapters.mindspore.tensor_stats import host_row
from engines.capture.entries import stats_columns
from engines.store.dump_schema import Direction, RecordKind

PREFIX_KERNEL = "Kernel"


def kernel_parent(k: Kernel) -> Tuple[str, List[Tuple[str, str, str]]]:
    """The cell record name the kernel belongs to ("" at the root) and the (path, class, parent path) of the
    cells on its scope below the root."""
    cells = k.cells()  # the graph's top cell (``Default``, a TrainOneStepCell) is the root, as in PyNative
    modules, path = [], ""
    for attr, cls in cells:
        parent = path
        path = attr if not path else path + "." + attr
        modules.append((path, cls, parent))
    if not cells:
        return "", modules
    direction = "backward" if k.backward else "forward"
    return "Cell.%s.%s.%s.0" % (path, cells[-1][1], direction), modules


def _load(path: str) -> Optional[np.ndarray]:
    try:
        return np.load(path, allow_pickle=False)
    except Exception:
        return None


def kernel_names(ks: Sequence[Kernel]) -> List[str]:
    """The record names of one step's kernels, in the order they ran."""
    counters: Counter = Counter()
    names = []
    for k in ks:
        direction = "backward" if k.backward else "forward"
        n = counters[(k.op_type, direction)]
        counters[(k.op_type, direction)] += 1
        names.append("%s.%s.%d.%s" % (PREFIX_KERNEL, k.op_type, n, direction))
    return names


def write_step(writer: Any, step: int, ks: Sequence[Kernel], *, save_tensors: bool, high: bool,
               seen_modules: Set[str], keep: Optional[Set[int]] = None,
               highlights: Any = None) -> Tuple[int, int]:
    """Records and rows of one step's kernels (only those at the positions ``keep`` when given: the names still
    count every kernel); returns (records, rows). ``highlights``: the run summary's ``TensorHighlights``, fed
    the step's rows (its "non finite" line and table). The caller commits the step."""
    all_names = kernel_names(ks)
    if keep is not None:
        all_names = [n for i, n in enumerate(all_names) if i in keep]
        ks = [k for i, k in enumerate(ks) if i in keep]
    names, dirs, parents, args = [], [], [], []
    new_modules: List[Tuple[str, str, str]] = []
    for name, k in zip(all_names, ks):
        names.append(name)
        dirs.append(int(Direction.BACKWARD if k.backward else Direction.FORWARD))
        parent, modules = kernel_parent(k)
        parents.append(parent)
        args.append(json.dumps(k.args))
        for m in modules:
            if m[0] not in seen_modules:
                seen_modules.add(m[0])
                new_modules.append(m)
    if new_modules:
        writer.add_modules([m[0] for m in new_modules], [m[1] for m in new_modules], [m[2] for m in new_modules])
    if not ks:
        return 0, 0
    rows = writer.add_records(step=step, name=names, kind=int(RecordKind.API), direction=dirs, parent=parents,
                              args=args)
    cols: Dict[str, List[Any]] = {c: [] for c in ("record", "slot", "dtype", "shape", "max", "min", "mean",
                                                  "norm", "valid", "nan_count", "posinf_count", "neginf_count")}
    refs = []
    local: List[int] = []  # each row's record as an index into this step's records (for the highlights)
    for index, (row, k) in enumerate(zip(rows.tolist(), ks)):
        for t in k.tensors:
            arr = _load(t.path)
            if arr is None:
                continue
            stats, valid, counts = stats_columns({0: host_row(arr, high)}, 1)
            local.append(index)
            cols["record"].append(row)
            cols["slot"].append(t.slot)
            cols["dtype"].append(t.dtype)
            cols["shape"].append(list(arr.shape))
            for i, c in enumerate(("max", "min", "mean", "norm")):
                cols[c].append(float(stats[0, i]))
            cols["valid"].append(int(valid[0]))
            for i, c in enumerate(("nan_count", "posinf_count", "neginf_count")):
                cols[c].append(int(counts[0, i]))
            refs.append(writer.put_tensor(arr, t.dtype) if save_tensors else None)
    if cols["record"]:
        writer.add_tensors(refs=refs, step=step, **cols)
        if highlights is not None:
            columns = {c: np.asarray(v) for c, v in cols.items() if c not in ("record", "shape")}
            columns["record"] = np.asarray(local)
            highlights.add_step(step, {"name": names, "args": args, "direction": dirs}, columns)
    return len(ks), len(cols["record"])


def training_steps(runs: Sequence[Tuple[int, int, int, List[Kernel]]]) -> List[Tuple[int, List[Kernel]]]:
    """(training step, kernels) of each graph run (first timestamp, graph id, iteration, kernels), in the order
    they ran. One graph (GRAPH_MODE): its iteration is the step. Several (``@jit`` functions in PyNative: a jit
    cell's forward, its backward, the optimizer's update, each with its own iteration counter, the others one
    ahead of the first): the graph compiled first (the lowest id: the one that opens every step) numbers the
    steps by its iteration, and every run belongs to the step of the last opening run before it (runs before the
    first opening run dumped belong to an earlier step, not selected: left out)."""
    ordered = sorted(runs, key=lambda r: (r[0], r[1]))
    graphs = {r[1] for r in runs}
    if len(graphs) <= 1:
        return [(it, ks) for _ts, _g, it, ks in sorted(runs, key=lambda r: (r[2], r[0]))]
    opening = min(graphs)
    out: List[Tuple[int, List[Kernel]]] = []
    current: Optional[int] = None
    for _ts, graph, it, ks in ordered:
        if graph == opening:
            current = it
        if current is not None:
            out.append((current, ks))
    return out


def grouped_steps(raw: str, steps: Optional[Set[int]] = None) -> List[Tuple[Tuple[int, int], List[Kernel]]]:
    """((rank, training step), kernels) of every dumped step of ``raw`` (:func:`training_steps`), the kernels of
    every graph run of the step in the order they ran; by rank, then step."""
    import os

    runs: Dict[int, List[Tuple[int, int, int, List[Kernel]]]] = {}
    scopes: Dict[Tuple[int, int], Dict[str, str]] = {}
    roots: Dict[Tuple[int, int], List[Tuple[str, str]]] = {}
    for rank, graph, it, folder in iterations(raw):
        if (rank, graph) not in scopes:
            rank_dir = os.path.join(raw, "rank_%d" % rank)
            scopes[(rank, graph)] = graph_scope_names(rank_dir, graph)
            roots[(rank, graph)] = jit_root(rank_dir, graph)
        ks = kernels(folder, scopes[(rank, graph)])
        for k in ks:
            k.root = roots[(rank, graph)]
        if ks:
            runs.setdefault(rank, []).append((min(k.first_ts for k in ks), graph, it, ks))
    grouped: Dict[Tuple[int, int], List[Kernel]] = {}
    for rank, rank_runs in runs.items():
        for step, ks in training_steps(rank_runs):
            if steps is None or step in steps:
                grouped.setdefault((rank, step), []).extend(ks)
    return sorted(grouped.items())


def convert(raw: str, writer_for_rank: Any, *, save_tensors: bool = False, high: bool = False,
            steps: Optional[Set[int]] = None, highlights: Any = None) -> Dict[int, Dict[int, Tuple[int, int]]]:
    """Every dumped training step of ``raw`` (``graph_kernels.write_config``'s ``raw`` folder, steps as
    :func:`training_steps` aligns the graphs' iterations) written as a step: ``writer_for_rank(rank)`` gives the
    rank's ``DumpWriter``. Returns {rank: {step: (records, rows)}}."""
    done: Dict[int, Dict[int, Tuple[int, int]]] = {}
    seen: Dict[int, Set[str]] = {}
    for (rank, it), ks in grouped_steps(raw, steps):
        writer = writer_for_rank(rank)
        done.setdefault(rank, {})[it] = write_step(writer, it, ks, save_tensors=save_tensors, high=high,
                                                   seen_modules=seen.setdefault(rank, set()),
                                                   highlights=highlights)
        writer.commit_step(it)
    return done

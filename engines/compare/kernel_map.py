"""Graph-mode kernels against API records: the MindSpore L2 dump's ``Kernel.{Op}.{N}.{direction}`` records paired
with the other side's API records (a PyNative MindSpore dump, or a PyTorch one through the MindSpore-to-PyTorch
names), so a graph-mode run compares row for row with an eager one (docs/MINDSPORE.md "Graph mode").

A kernel pairs with an API record when its op type computes that API as one kernel (:data:`KERNEL_APIS`:
``Softmax`` is ``MintFunctional.softmax``, ``BatchMatMul`` is ``Tensor.matmul``...), in call order: the forward
kernels and the other side's forward API records are aligned as sequences (longest common subsequence), two
entries being alignable when the kernel's op can be the API and their first outputs hold as many elements. A
kernel MindSpore made by expanding an API into several kernels (``Expand/_Dense/...``: a linear is a Reshape, a
MatMul, an Add and a Reshape, none of them the linear's output) pairs only where the expansion is one kernel
(:data:`ONE_KERNEL_EXPANSIONS`). The paired kernel takes the API record's name and its tensors the API's slots
(:data:`KERNEL_APIS`' argument maps); everything else keeps its ``Kernel`` name, so it is reported unmatched
rather than dropped: the expanded and fused kernels, the kernel's extra inputs (a LayerNorm kernel's axes and
epsilon). Backward kernels pair the same way where one kernel computes an API call's whole gradient
(:data:`BACKWARD_KERNEL_APIS`: ``LayerNormGrad`` is ``Primitive.LayerNorm``'s backward), against the backward
API records in the order the backward ran, with both element counts known; the other gradient kernels
(MindSpore's own, not one per API call: a linear's two MatMuls, softmax's expanded gradient) stay unmatched.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines.dumps.names import parse_record
from engines.dumps.rows import DIR_BACKWARD, DIR_FORWARD, KIND_API, RowTable

KERNEL_PREFIX = "Kernel."
UNMAPPED = ".kernel"  # appended to a kernel slot no API argument stands for: it matches nothing

# op type -> (the API names one such kernel computes, {kernel input index: API input index}, {output: output});
# an output map of None keeps every output's index
_BINARY = {0: 0, 1: 1}
KERNEL_APIS: Dict[str, Tuple[Tuple[str, ...], Dict[int, int], Optional[Dict[int, int]]]] = {
    "LayerNorm": (("Primitive.LayerNorm",), {0: 0, 1: 1, 2: 2}, None),
    "Gather": (("Functional.gather",), {0: 0, 1: 1}, {0: 0}),
    "Softmax": (("MintFunctional.softmax", "Functional.softmax", "Tensor.softmax"), {0: 0}, {0: 0}),
    "LogSoftmax": (("MintFunctional.log_softmax", "Functional.log_softmax"), {0: 0}, {0: 0}),
    "BatchMatMul": (("Tensor.matmul", "Tensor.__matmul__", "Mint.matmul", "Mint.bmm", "Functional.matmul"),
                    _BINARY, {0: 0}),
    "MatMul": (("Tensor.matmul", "Tensor.__matmul__", "Mint.matmul", "Mint.mm", "Functional.matmul"),
               _BINARY, {0: 0}),
    "Split": (("Tensor.split", "Functional.split", "Mint.split"), {0: 0}, None),
    "Reshape": (("Tensor.view", "Tensor.reshape", "Functional.reshape", "Mint.reshape"), {0: 0}, {0: 0}),
    "Transpose": (("Tensor.transpose", "Mint.transpose", "Tensor.permute"), {0: 0}, {0: 0}),
    "TransposeExtView": (("Tensor.transpose", "Mint.transpose"), {0: 0}, {0: 0}),
    "Add": (("Tensor.add", "Tensor.__add__", "Mint.add", "Functional.add"), _BINARY, {0: 0}),
    "Sub": (("Tensor.sub", "Tensor.__sub__", "Mint.sub", "Functional.sub"), _BINARY, {0: 0}),
    "Mul": (("Tensor.mul", "Tensor.__mul__", "Mint.mul", "Functional.mul"), _BINARY, {0: 0}),
    "Div": (("Tensor.div", "Tensor.__truediv__", "Mint.div", "Functional.div"), _BINARY, {0: 0}),
    "RealDiv": (("Tensor.div", "Tensor.__truediv__", "Mint.div", "Functional.div"), _BINARY, {0: 0}),
    "MaskedFill": (("Tensor.masked_fill", "Functional.masked_fill"), {0: 0, 1: 1, 2: 2}, {0: 0}),
    "Exp": (("Mint.exp", "Tensor.exp", "Functional.exp"), {0: 0}, {0: 0}),
    "Log": (("Mint.log", "Tensor.log", "Functional.log"), {0: 0}, {0: 0}),
    "Sqrt": (("Mint.sqrt", "Tensor.sqrt", "Functional.sqrt"), {0: 0}, {0: 0}),
    "Tanh": (("Mint.tanh", "Tensor.tanh", "Functional.tanh"), {0: 0}, {0: 0}),
    "ReLU": (("MintFunctional.relu", "Functional.relu"), {0: 0}, {0: 0}),
    "GeLU": (("Functional.gelu", "MintFunctional.gelu"), {0: 0}, {0: 0}),
    "ReduceSum": (("Tensor.sum", "Mint.sum", "Functional.reduce_sum"), {0: 0}, {0: 0}),
    "ReduceMean": (("Tensor.mean", "Mint.mean", "Functional.reduce_mean"), {0: 0}, {0: 0}),
    "Cast": (("Tensor.astype", "Tensor.to", "Tensor.float", "Tensor.half", "Functional.cast"), {0: 0}, {0: 0}),
}
# backward kernels that compute one API call's whole gradient, against that API's backward record (its inputs
# the gradients of the call's outputs, its outputs those of the call's inputs): LayerNormGrad reads (x, dy,
# variance, mean, gamma) and gives (dx, dgamma, dbeta); split's gradient is the Concat of its outputs' gradients;
# an embedding lookup's (gather's) is an UnsortedSegmentSum of the output's gradient
BACKWARD_KERNEL_APIS: Dict[str, Tuple[Tuple[str, ...], Dict[int, int], Optional[Dict[int, int]]]] = {
    "LayerNormGrad": (("Primitive.LayerNorm",), {1: 0}, {0: 0, 1: 1, 2: 2}),
    "Concat": (("Tensor.split", "Functional.split", "Mint.split"), {i: i for i in range(64)}, {0: 0}),
    "UnsortedSegmentSum": (("Functional.gather",), {0: 0}, {0: 0}),
}
# MindSpore's ``Expand/<_Api>/...`` scopes whose expansion is a single kernel: that kernel is the API call
ONE_KERNEL_EXPANSIONS = frozenset(("_MatMulExt", "_Muls", "_Mul", "_MaskedFillScalar", "_MaskedFill", "_SumExt",
                                   "_Softmax", "_Exp", "_AddExt", "_SubExt", "_Div"))
_MAX_CELLS = 4_000_000  # alignment table size beyond which the alignment is greedy (a very large step)


def has_kernels(rows: RowTable) -> bool:
    return bool(len(rows)) and any(str(r).startswith(KERNEL_PREFIX) for r in rows.record_order())


def _scope(args: Dict[str, str], record: str) -> str:
    text = args.get(record) or ""
    marker = '"scope": "'
    at = text.find(marker)
    return text[at + len(marker):text.find('"', at + len(marker))] if at >= 0 else ""


def _entry(record: str) -> Optional[Tuple[Tuple[str, ...], Dict[int, int], Optional[Dict[int, int]]]]:
    """The kernel's op type's entry of :data:`KERNEL_APIS` (forward) or :data:`BACKWARD_KERNEL_APIS`."""
    op = record[len(KERNEL_PREFIX):].split(".", 1)[0]
    return (BACKWARD_KERNEL_APIS if record.endswith(".backward") else KERNEL_APIS).get(op)


def _candidates(record: str, scope: str) -> Tuple[str, ...]:
    entry = _entry(record)
    if entry is None:
        return ()
    parts = scope.split("/")[:-1]  # ``Expand/_Dense/MatMul-op0``, or under its cell: ``.../qkv-Linear/Expand/...``
    if "Expand" in parts:
        at = parts.index("Expand") + 1
        expansion = parts[at] if at < len(parts) else ""
        if expansion not in ONE_KERNEL_EXPANSIONS:
            return ()
    return entry[0]


def _first_output_numel(rows: RowTable) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for record, slot, numel in zip(rows.record.tolist(), rows.slot.tolist(), rows.numel.tolist()):
        if slot == "output.0":
            out[record] = int(numel)
    return out


def _align(kernels: Sequence[Tuple[str, Tuple[str, ...], int]], apis: Sequence[Tuple[str, str, int]],
           known: bool = False) -> List[Tuple[int, int]]:
    """(kernel index, api index) pairs of the longest common subsequence; entries align when the API's (mapped)
    name is one of the kernel's and their first outputs' element counts agree (or one is unknown, unless
    ``known``)."""

    def fits(k: Tuple[str, Tuple[str, ...], int], a: Tuple[str, str, int]) -> bool:
        if known and (k[2] < 0 or a[2] < 0):
            return False
        return a[1] in k[1] and (k[2] < 0 or a[2] < 0 or k[2] == a[2])

    n, m = len(kernels), len(apis)
    if n * m > _MAX_CELLS:
        pairs, j = [], 0
        for i, k in enumerate(kernels):
            for jj in range(j, min(m, j + 64)):
                if fits(k, apis[jj]):
                    pairs.append((i, jj))
                    j = jj + 1
                    break
        return pairs
    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    for i in range(n - 1, -1, -1):
        k = kernels[i]
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            if fits(k, apis[j]):
                row[j] = below[j + 1] + 1
            else:
                row[j] = max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if fits(kernels[i], apis[j]) and table[i, j] == table[i + 1, j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1, j] >= table[i, j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _slot(slot: str, entry: Tuple[Tuple[str, ...], Dict[int, int], Optional[Dict[int, int]]]) -> str:
    state, _, rest = slot.partition(".")
    head, _, tail = rest.partition(".")
    index_map = entry[1] if state == "input" else entry[2] if state == "output" else {}
    if not head.isdigit():
        return slot + UNMAPPED
    if index_map is None:
        return slot
    if int(head) not in index_map:
        return slot + UNMAPPED
    return state + "." + str(index_map[int(head)]) + ("." + tail if tail else "")


def kernel_names(kernel_rows: RowTable, other_rows: RowTable, to_other: Callable[[str], str]) -> Dict[str, str]:
    """Kernel record -> the API record name it stands for (on the kernel side's naming: ``to_other`` maps such
    an API name to the other side's, as compare's keys will), for the kernels that pair with an API record."""
    out: Dict[str, str] = {}
    for direction in (DIR_FORWARD, DIR_BACKWARD):
        out.update(_direction_names(kernel_rows, other_rows, to_other, direction))
    return out


def _direction_names(kernel_rows: RowTable, other_rows: RowTable, to_other: Callable[[str], str],
                     direction: int) -> Dict[str, str]:
    """:func:`kernel_names` of one direction: the forward kernels against the forward API records in call order,
    the backward ones against the backward records in the order the backward ran (both sides record it as it
    runs: the reverse of the calls)."""
    args = kernel_rows.args
    numel_k, numel_o = _first_output_numel(kernel_rows), _first_output_numel(other_rows)
    kernels: List[Tuple[str, Tuple[str, ...], int]] = []
    for record in kernel_rows.record_order():
        rec = parse_record(record)
        if not record.startswith(KERNEL_PREFIX) or rec.kind != KIND_API or rec.direction != direction:
            continue
        cands = _candidates(record, _scope(args, record))
        if cands:
            kernels.append((record, tuple(to_other(c) for c in cands), numel_k.get(record, -1)))
    apis: List[Tuple[str, str, int]] = []
    for record in other_rows.record_order() if kernels else []:
        rec = parse_record(record)
        if rec.kind == KIND_API and rec.direction == direction and rec.index is not None \
                and not record.startswith(KERNEL_PREFIX):
            apis.append((record, rec.base, numel_o.get(record, -1)))
    out: Dict[str, str] = {}
    suffix = "forward" if direction == DIR_FORWARD else "backward"
    # backward: both counts known (the compiler orders independent gradients its own way, so where the two runs
    # differ only the element counts keep two gradients of one API apart)
    for i, j in _align(kernels, apis, known=direction == DIR_BACKWARD):
        record, cands, _ = kernels[i]
        entry = _entry(record)
        assert entry is not None  # a kernel with candidates has an entry
        ms_name = entry[0][cands.index(apis[j][1])]
        out[record] = "%s.%d.%s" % (ms_name, parse_record(apis[j][0]).index or 0, suffix)
    return out


def renamed_kernels(kernel_rows: RowTable, other_rows: RowTable, to_other: Callable[[str], str]) -> RowTable:
    """``kernel_rows`` with each paired kernel named as its API record and its slots as the API's (the names
    compare's keys are built from); the other rows as they were."""
    names = kernel_names(kernel_rows, other_rows, to_other)
    if not names:
        return kernel_rows
    records = kernel_rows.record.copy()
    slots = kernel_rows.slot.copy()
    full = kernel_rows.name.copy()
    for i, (record, slot) in enumerate(zip(kernel_rows.record.tolist(), kernel_rows.slot.tolist())):
        new = names.get(record)
        if new is None:
            continue
        entry = _entry(record)
        if entry is None:
            continue
        records[i] = new
        slots[i] = _slot(slot, entry)
        full[i] = new + "." + slots[i]
    return dataclasses.replace(kernel_rows, record=records, slot=slots, name=full)

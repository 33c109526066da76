"""``overflow_check`` at level L2: where a non-finite value started among the kernels of graph-mode execution,
read from MindSpore's e2e kernel dump (``graph_kernels``; docs/OVERFLOW.md "Graph mode (MindSpore, L2)").

The kernels of a step are classified in the order they ran with the PyNative check's rules
(``engines.overflow.origin.classify``): a kernel whose outputs hold a kind of inf/NaN that none of its inputs
holds is ``produced`` (the origin), one reading a bad input is ``inputs``. A kernel dump has no tensor
identities, so a non-finite input is linked to what an earlier kernel wrote by its content (dtype, shape and
bytes; remembered across steps): it takes that kernel's taint (a mask's -inf, read by the softmax, stays a mask).
A non-finite input no earlier kernel wrote is a fill when it is a scalar of one sign (the dumped ``-inf`` of
``masked_fill``), else bad (a parameter already NaN from the previous step). Needs no MindSpore: it reads files.
"""

import hashlib
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from engines.adapters.mindspore.graph_kernels import Kernel
from engines.adapters.mindspore.graph_records import kernel_names, kernel_parent
from engines.overflow import origin as og
from engines.overflow.report import FlaggedCall, StepFindings

TaintMemory = Dict[Tuple[str, Tuple[int, ...], str], int]


def _kinds(arr: np.ndarray) -> int:
    if arr.dtype.kind not in "fc" or arr.size == 0 or bool(np.isfinite(arr).all()):
        return 0
    kinds = 0
    if bool(np.isnan(arr).any()):
        kinds |= og.NAN
    if bool(np.isposinf(arr).any()):
        kinds |= og.POSINF
    if bool(np.isneginf(arr).any()):
        kinds |= og.NEGINF
    return kinds


def _extremes(arr: np.ndarray) -> int:
    if arr.dtype.kind != "f" or arr.size == 0:
        return 0
    info = np.finfo(arr.dtype)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return 0
    out = 0
    if float(finite.max()) >= float(info.max):
        out |= og.EXTREME_MAX
    if float(finite.min()) <= float(info.min):
        out |= og.EXTREME_MIN
    return out


def _key(arr: np.ndarray) -> Tuple[str, Tuple[int, ...], str]:
    return str(arr.dtype), tuple(arr.shape), hashlib.blake2b(np.ascontiguousarray(arr).tobytes(),
                                                             digest_size=16).hexdigest()


def _load(path: str) -> Optional[np.ndarray]:
    try:
        return np.load(path, allow_pickle=False)
    except Exception:
        return None


def check_step(step: int, ks: Sequence[Kernel], memory: TaintMemory, limit: int) -> Tuple[StepFindings, Set[int]]:
    """The findings of one step's kernels and the positions of the flagged kernels to keep. ``limit``: how many
    more flagged kernels may be kept (-1: no limit); when it is reached the step stops there (``stopped``)."""
    findings = StepFindings(step)
    names = kernel_names(ks)
    keep: Set[int] = set()
    for i, k in enumerate(ks):
        findings.checked += 1
        ins: List[og.TensorFacts] = []
        outs: List[og.TensorFacts] = []
        loaded: List[Tuple[og.TensorFacts, np.ndarray]] = []
        for t in k.tensors:
            arr = _load(t.path)
            if arr is None:
                continue
            facts = og.TensorFacts(t.slot, _kinds(arr))
            is_input = t.slot.startswith("input")
            (ins if is_input else outs).append(facts)
            loaded.append((facts, arr))
            if facts.kinds and is_input:
                known = memory.get(_key(arr))
                facts.taint = known if known is not None else og.external_taint(facts.kinds, arr.ndim > 0)
        if any(f.kinds for f in outs):  # a finfo.max/min fill explains an infinity of its sign
            for facts, arr in loaded:
                if facts.slot.startswith("input"):
                    facts.extremes = _extremes(arr)
        verdict = og.classify(ins, outs)
        for facts, arr in loaded:
            if facts.kinds and not facts.slot.startswith("input"):
                facts.taint = verdict.output_taint
                memory[_key(arr)] = verdict.output_taint
        if verdict.origin == og.MASKED:
            findings.masks += 1
        if not verdict.flagged:
            continue
        findings.flagged += 1
        kept = limit < 0 or len(keep) < limit
        if kept:
            keep.add(i)
        parent, _cells = kernel_parent(k)
        slots = {f.slot: og.kinds_text(f.kinds) for f in ins + outs if f.kinds}
        findings.add(FlaggedCall(len(findings.calls), names[i], 0, 1 if k.backward else 0, verdict.origin,
                                 verdict.reason, parent, kept, slots))
        if limit >= 0 and len(keep) >= limit:
            findings.stopped = True
            break
    return findings, keep

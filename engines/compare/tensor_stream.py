"""Tensor-mode compare of many row pairs: chunks stream from both dumps through worker processes.

Work is cut into units of about ``unit_bytes`` of data (small tensors batched, large tensors split into element
ranges). Each worker opens both dumps once (the tensor specs are picklable), reads ``chunk`` elements at a time
from each side and returns mergeable :class:`~engines.compare.tensor_metrics.TensorPartial` sums, so neither the
workers nor the parent ever hold a whole dump, and only a bounded number of units are in flight. Workers use the
``spawn`` start method (safe with threads and with a framework imported in the parent). Small jobs run in-process:
starting workers costs more than it saves.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from engines.compare.tensor_metrics import TensorAccumulator, TensorPartial

CHUNK = 1 << 22  # elements read per side per step (16 MiB of float32 each)
UNIT_BYTES = 64 << 20
INPROCESS_BYTES = 256 << 20


@dataclass(frozen=True)
class PairTask:
    row: int  # index in the caller's result table
    t_loc: int
    g_loc: int
    numel: int
    itemsize: int  # bytes per element of one side (for planning)


@dataclass
class PairOutcome:
    partial: Optional[TensorPartial] = None
    x_dtype: Optional[str] = None
    y_dtype: Optional[str] = None
    error: str = ""
    worker: int = 0  # pid of the process that computed it


Unit = List[Tuple[PairTask, int, int]]  # (task, start, stop)


def plan_units(tasks: Sequence[PairTask], unit_bytes: int = UNIT_BYTES) -> List[Unit]:
    units: List[Unit] = []
    current: Unit = []
    size = 0
    for task in tasks:
        per = max(task.itemsize, 1) * 2
        total = task.numel * per
        if total > unit_bytes:
            step = max(unit_bytes // per, 1)
            for start in range(0, task.numel, step):
                units.append([(task, start, min(task.numel, start + step))])
            continue
        current.append((task, 0, task.numel))
        size += total
        if size >= unit_bytes:
            units.append(current)
            current, size = [], 0
    if current:
        units.append(current)
    return units


_WORKER: Dict[str, object] = {}


def _worker_init(t_spec, g_spec, rel_eps, small_value) -> None:
    _WORKER["t"] = t_spec.open()
    _WORKER["g"] = g_spec.open()
    _WORKER["rel_eps"] = rel_eps
    _WORKER["small_value"] = small_value


def _run_unit(unit: Unit) -> List[Tuple[int, PairOutcome]]:
    return compare_unit(unit, _WORKER["t"], _WORKER["g"], _WORKER["rel_eps"], _WORKER["small_value"])


def compare_unit(unit: Unit, t_reader, g_reader, rel_eps, small_value: float = 0.0,
                 chunk: int = CHUNK) -> List[Tuple[int, PairOutcome]]:
    out = []
    for task, start, stop in unit:
        try:
            x_dtype, x_numel, _ = t_reader.info(task.t_loc)
            y_dtype, y_numel, _ = g_reader.info(task.g_loc)
            if x_numel != y_numel:
                out.append((task.row, PairOutcome(error="element counts differ: {} vs {}".format(x_numel, y_numel))))
                continue
            acc = TensorAccumulator(x_dtype, y_dtype, rel_eps, small_value)
            for lo in range(start, stop, chunk):
                hi = min(stop, lo + chunk)
                acc.update(t_reader.read(task.t_loc, lo, hi), g_reader.read(task.g_loc, lo, hi))
            out.append((task.row, PairOutcome(acc.part, str(x_dtype), str(y_dtype), worker=os.getpid())))
        except (OSError, ValueError, KeyError) as exc:
            out.append((task.row, PairOutcome(error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)))
    return out


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 32))


def compare_pairs(tasks: Sequence[PairTask], t_spec, g_spec, *, rel_eps: Optional[float] = None,
                  small_value: float = 0.0, parent_helps: bool = True, workers: Optional[int] = None, progress: Optional[Callable[[int, int], None]] = None,
                  unit_bytes: int = UNIT_BYTES) -> Dict[int, PairOutcome]:
    """Compare every pair; returns row -> merged outcome. ``progress(done_bytes, total_bytes)``.
    ``parent_helps``: this process computes units too while the workers start and whenever none is done."""
    units = plan_units(tasks, unit_bytes)
    total = sum(t.numel * t.itemsize * 2 for t in tasks)
    workers = default_workers() if workers is None else max(1, workers)
    results: Dict[int, PairOutcome] = {}
    done = 0

    def absorb(items: List[Tuple[int, PairOutcome]], unit_size: int) -> None:
        nonlocal done
        for row, outcome in items:
            have = results.get(row)
            if have is None:
                results[row] = outcome
            elif outcome.error:
                have.error = have.error or outcome.error
            elif have.partial is not None and outcome.partial is not None:
                have.partial.merge(outcome.partial)
        done += unit_size
        if progress:
            progress(done, total)

    def unit_size(unit: Unit) -> int:
        return sum((stop - start) * task.itemsize * 2 for task, start, stop in unit)

    t_reader, g_reader = t_spec.open(), g_spec.open()
    try:
        if workers == 1 or total <= INPROCESS_BYTES or len(units) == 1:
            for unit in units:
                absorb(compare_unit(unit, t_reader, g_reader, rel_eps, small_value), unit_size(unit))
            return results
        # workers - 1 processes plus this one: while the pool starts (imports, opening the dumps) and whenever no
        # result is ready, the parent takes the next unit itself, so starting workers never idles the job.
        ctx = multiprocessing.get_context("spawn")
        queue = iter(units)
        helpers = workers - 1 if parent_helps else workers
        with ProcessPoolExecutor(max_workers=min(helpers, len(units)), mp_context=ctx,
                                 initializer=_worker_init, initargs=(t_spec, g_spec, rel_eps, small_value)) as pool:
            pending = {}
            for unit in queue:
                pending[pool.submit(_run_unit, unit)] = unit_size(unit)
                if len(pending) >= 2 * helpers:
                    break
            while pending:
                finished = [f for f in pending if f.done()]
                if not finished and parent_helps:
                    unit = next(queue, None)
                    if unit is not None:
                        absorb(compare_unit(unit, t_reader, g_reader, rel_eps, small_value), unit_size(unit))
                        continue
                if not finished:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    size = pending.pop(fut)
                    absorb(fut.result(), size)
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[pool.submit(_run_unit, nxt)] = unit_size(nxt)
        return results
    finally:
        t_reader.close()
        g_reader.close()


def itemsize_of(dtype_text: str) -> int:
    """Bytes per element guessed from a dtype name (for planning only)."""
    text = dtype_text.lower()
    for width in ("64", "32", "16", "8"):
        if width in text:
            return int(width) // 8
    if "bool" in text:
        return 1
    return 4


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else math.inf

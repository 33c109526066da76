"""Rank pairs compared on worker processes of one machine, gathered in order for the one process that writes.

A compare is a list of (rank, step) pieces; each piece is read, matched, measured and judged on its own
(:func:`compute_piece`). With ``workers`` W > 1 the pieces go to W - 1 spawned processes plus this one (which
takes the next piece itself whenever no result is ready and few are held, as the tensor workers do), and come
back in piece order, so the caller ranks and writes exactly what one process would have: the result files are the
same byte for byte. At most ``W + 1`` finished pieces are held at once (a worker's result waits while an earlier
piece is still being compared), so memory stays bounded by the pieces' size, not the dump's.

``workers`` unset: as many as cores and pieces allow, but only once the first piece (compared here) took longer
than :data:`POOL_AFTER_S`: a small compare never pays for starting processes. Workers use the ``spawn`` start
method (safe with the readers' open HDF5 files and with threads) and open both dumps once, by path.

The same :func:`compute_piece` runs under a launcher (torchrun, srun; :mod:`engines.compare.dist_split`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Generator, Iterator, Optional, Sequence, Tuple

import numpy as np

from engines.compare.merged_source import MergeOptions, after_piece, merge_sides
from engines.compare.piece import PieceSettings, compare_piece
from engines.compare.verdicts import VERDICTS
from engines.dumps.opener import open_dump
from engines.dumps.source import DumpSource, DumpSourceError

#: Seconds the first piece may take before workers start (``workers`` unset).
POOL_AFTER_S = 0.5
#: The most workers an unset ``workers`` picks.
MAX_DEFAULT_WORKERS = 32

Piece = Tuple[int, int, int]  # (rank, target step, golden step)


@dataclass
class PieceResult:
    """One piece compared: its result columns and golden-only rows, or the one line a damaged dump gave."""

    n: int  # the piece's index in the compare's list
    cols: Dict[str, np.ndarray] = field(default_factory=dict)
    only: Dict[str, np.ndarray] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True)
class SideSpec:
    """What a worker needs to compare pieces on its own: both dumps' paths, the mode and the settings."""

    target_path: Path
    golden_path: Path
    mode: str
    settings: PieceSettings
    #: how the ranks of a parallel side merge (``engines.compare.merged_source``): every process that opens the
    #: sides merges them the same way
    merge: Optional[MergeOptions] = None


#: verdict name -> the code the results columns hold
VERDICT_CODE = {name: code for code, name in enumerate(VERDICTS)}


def compute_piece(target: DumpSource, golden: DumpSource, mode: str, settings: PieceSettings, n: int,
                  piece: Piece) -> PieceResult:
    rank, t_step, g_step = piece
    try:
        target.release_others(rank)  # pieces come rank after rank: memory stays flat with the rank count
        golden.release_others(rank)
        t_rows, g_rows = target.rows(rank, t_step), golden.rows(rank, g_step)
        t_spec = target.tensor_spec(rank, t_step) if mode == "tensor" else None
        g_spec = golden.tensor_spec(rank, g_step) if mode == "tensor" else None
    except DumpSourceError as exc:
        return PieceResult(n, error=str(exc))
    cols, match = compare_piece(t_rows, g_rows, t_spec, g_spec, settings)
    after_piece(cols, target, golden, rank, t_step, g_step, mode, VERDICT_CODE)
    only = {"rank": np.full(match.golden_only.shape[0], rank, dtype=np.int64),
            "step": np.full(match.golden_only.shape[0], g_step, dtype=np.int64),
            "golden_name": g_rows.name[match.golden_only],
            "golden_dtype": g_rows.dtype[match.golden_only],
            "golden_shape": g_rows.shape[match.golden_only]}
    return PieceResult(n, cols, only)


def default_workers(pieces: int) -> int:
    return max(1, min(os.cpu_count() or 1, pieces, MAX_DEFAULT_WORKERS))


def worker_settings(settings: PieceSettings) -> PieceSettings:
    """Settings for a process that is one of several comparing pieces: no pool of tensor workers of its own
    (the pieces are the parallel work), no progress callback (it cannot cross processes)."""
    return replace(settings, workers=1, progress=None)


class SideReader:
    """Both dumps opened by path (in a worker process, or in each process of a launch)."""

    def __init__(self, spec: SideSpec):
        self.spec = spec
        self.target = open_dump(spec.target_path)
        self.golden = open_dump(spec.golden_path)
        if spec.merge is not None:
            self.target, self.golden = merge_sides(self.target, self.golden, spec.merge, [])

    def compute(self, n: int, piece: Piece) -> PieceResult:
        return compute_piece(self.target, self.golden, self.spec.mode, self.spec.settings, n, piece)

    def close(self) -> None:
        self.target.close()
        self.golden.close()


_READER: Dict[str, SideReader] = {}


def _init_worker(spec: SideSpec) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the compare (and this pool); a worker interrupted
    # as well would only print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _READER["sides"] = SideReader(spec)


def _work(n: int, piece: Piece) -> PieceResult:
    try:
        return _READER["sides"].compute(n, piece)
    except DumpSourceError as exc:
        return PieceResult(n, error=str(exc))


def piece_results(pieces: Sequence[Piece], target: DumpSource, golden: DumpSource, spec: SideSpec,
                  workers: Optional[int], done: Optional[Callable[[int, PieceResult], None]] = None
                  ) -> Generator[PieceResult, None, None]:
    """Every piece's result, in piece order. ``done(count, result)`` is called as each piece finishes (in any
    process, in the order they finish): progress across workers."""
    count = 0

    def finished(result: PieceResult) -> PieceResult:
        nonlocal count
        count += 1
        if done is not None:
            done(count, result)
        return result

    wanted = default_workers(len(pieces)) if workers is None else max(1, int(workers))
    wanted = min(wanted, len(pieces))
    local_settings = spec.settings if wanted <= 1 else worker_settings(spec.settings)
    queue = iter(enumerate(pieces))
    if workers is None and wanted > 1:
        # the first piece here: a small compare is over before a worker would have started
        t0 = time.perf_counter()
        first = next(queue)
        yield finished(compute_piece(target, golden, spec.mode, spec.settings, *first))
        if time.perf_counter() - t0 < POOL_AFTER_S:
            wanted = 1
            local_settings = spec.settings
    if wanted <= 1:
        for n, piece in queue:
            yield finished(compute_piece(target, golden, spec.mode, local_settings, n, piece))
        return
    yield from _pooled(queue, target, golden, replace(spec, settings=worker_settings(spec.settings)), wanted,
                       finished)


def _pooled(queue: Iterator[Tuple[int, Piece]], target: DumpSource, golden: DumpSource, spec: SideSpec,
            workers: int, finished: Callable[[PieceResult], PieceResult]) -> Generator[PieceResult, None, None]:
    helpers = workers - 1
    limit = workers + 1  # finished pieces held, waiting for an earlier one
    held: Dict[int, PieceResult] = {}
    pending: Dict["Future[PieceResult]", Tuple[int, Piece]] = {}
    first = next(queue, None)
    if first is None:
        return
    nxt = first[0]  # the index the caller gets next (pieces leave the queue in order)
    broken = False

    def here(item: Tuple[int, Piece]) -> None:
        held[item[0]] = finished(compute_piece(target, golden, spec.mode, spec.settings, *item))

    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=helpers, mp_context=ctx, initializer=_init_worker, initargs=(spec,))
    completed = False  # the pool is shut down below, waiting for its workers only when the compare went through

    def refill() -> None:
        while not broken and len(pending) <= helpers and len(held) + len(pending) < limit:
            item = next(queue, None)
            if item is None:
                return
            pending[pool.submit(_work, *item)] = item

    try:
        refill()  # the workers start on the pieces after the first; this process compares the first
        here(first)
        while True:
            if nxt in held:
                yield held.pop(nxt)
                nxt += 1
                continue
            if not pending:  # nothing held either (pieces leave the queue in order): start the next ones
                refill()
                if not pending:
                    item = next(queue, None)
                    if item is None:
                        completed = True
                        return
                    here(item)
                continue
            ready = [f for f in pending if f.done()]
            if not ready and len(held) < limit:
                item = next(queue, None)
                if item is not None:  # nothing ready: this process compares the next piece itself
                    here(item)
                    continue
            if not ready:
                ready = list(wait(list(pending), return_when=FIRST_COMPLETED)[0])
            for fut in ready:
                item = pending.pop(fut)
                try:
                    held[item[0]] = finished(fut.result())
                except BrokenProcessPool:  # a worker died (killed, out of memory): the rest is done here
                    broken = True
                    here(item)
            refill()
    finally:
        pool.shutdown(wait=completed, cancel_futures=True)


__all__ = ["PieceResult", "SideSpec", "SideReader", "compute_piece", "piece_results", "default_workers",
           "worker_settings"]

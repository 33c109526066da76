"""The CSV report (msprobe 26.2's default format): its columns, then ours (RelErr, Rank, Step).

The text is built a block of rows at a time in numpy (:mod:`engines.compare.csv_fields`): no Python object per
cell, numbers in Python's ``repr`` form. A large report is written by a forked process while the parent goes on
with the ranking and the HDF5 store (:func:`start_csv`); then the parent formats blocks from the end while the
process finishes the front. The file appears under its name only when complete.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from engines import safe_fs
from engines.compare.columns import report_headers
from engines.compare.csv_fields import csv_fields, csv_text, rows_bytes

BLOCK_ROWS = 1 << 14  # rows a block: its buffers stay in cache (16k rows measured ~20% faster than 64k)
BACKGROUND_ROWS = 100_000  # below this, forking costs more than it saves
HELP_FRACTION = 0.25  # the parent helps the writer process when at least this share of blocks is left
HELP_BYTES = 256 << 20  # at most this much report text held by the parent while the writer finishes its part


def _header(mode: str, stack: bool, classic: bool) -> bytes:
    return (",".join(csv_text(h) for h in report_headers(mode, stack=stack, classic=classic)) + "\n").encode("utf-8")


def _write(tmp: Path, cols: Dict[str, np.ndarray], mode: str, stack: bool, classic: bool,
           claim: Optional[Callable[[], Optional[int]]] = None) -> None:
    """The header and the blocks ``claim()`` hands out (every block, in order, when None)."""
    n = int(cols["verdict"].shape[0])
    fields = csv_fields(cols, mode, stack=stack, classic=classic)
    if claim is None:
        blocks = iter(range(_n_blocks(n)))
        claim = lambda: next(blocks, None)  # noqa: E731
    with safe_fs.create_file(tmp, "wb", replace=True) as fh:
        fh.write(_header(mode, stack, classic))
        block = claim()
        while block is not None:
            fh.write(rows_bytes(fields, block * BLOCK_ROWS, min(n, (block + 1) * BLOCK_ROWS)))
            block = claim()


def _n_blocks(n: int) -> int:
    return (n + BLOCK_ROWS - 1) // BLOCK_ROWS


class _Claims:
    """Blocks shared by the writer process (from the front, in order) and the parent (from the back)."""

    def __init__(self, ctx: BaseContext, n_blocks: int) -> None:
        self.next = ctx.Array("q", [0, n_blocks])  # [first unclaimed, one past the last unclaimed]

    def front(self) -> Optional[int]:
        with self.next.get_lock():
            if self.next[0] >= self.next[1]:
                return None
            self.next[0] += 1
            return self.next[0] - 1

    def back(self) -> Optional[int]:
        with self.next.get_lock():
            if self.next[1] <= self.next[0]:
                return None
            self.next[1] -= 1
            return self.next[1]

    def left(self) -> int:
        with self.next.get_lock():
            return self.next[1] - self.next[0]


def write_csv(path: Path, cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> Path:
    """Write the report now. Atomic: a temporary file renamed into place, so a reader never sees half a report."""
    path = Path(path)
    return _inline(path, path.with_name(path.name + ".partial"), cols, mode, stack, classic).wait()


def _inline(path: Path, tmp: Path, cols: Dict[str, np.ndarray], mode: str, stack: bool, classic: bool) -> "CsvJob":
    job = CsvJob(path, tmp)
    try:
        _write(tmp, cols, mode, stack, classic)
    except BaseException:
        job.abort()
        raise
    return job


def _child(conn: Connection, tmp: str, cols: Dict[str, np.ndarray], mode: str, stack: bool, classic: bool, claims: _Claims) -> None:
    try:
        _write(Path(tmp), cols, mode, stack, classic, claims.front)
        conn.send(None)
    except BaseException as exc:  # reported to the parent, which raises it
        conn.send("{}: {}".format(type(exc).__name__, exc))
    finally:
        conn.close()


class CsvJob:
    """A report being written; :meth:`wait` returns its path (raising what went wrong), :meth:`abort` stops it
    and removes the partial file. While it waits, the parent formats blocks from the end of the report (the
    writer process takes them from the start) and appends them when the writer is done."""

    def __init__(self, path: Path, tmp: Path, proc: Optional[BaseProcess] = None, conn: Optional[Connection] = None,
                 claims: Optional[_Claims] = None, job: Optional[Tuple[Dict[str, np.ndarray], str, bool, bool]] = None
                 ) -> None:
        self.path, self.tmp, self.proc, self.conn = path, tmp, proc, conn
        self.claims, self.job = claims, job

    def _help(self) -> Dict[int, bytes]:
        parts: Dict[int, bytes] = {}
        if self.claims is None or self.job is None:  # written inline: no blocks left to take
            return parts
        cols, mode, stack, classic = self.job
        n = int(cols["verdict"].shape[0])
        if self.claims.left() < HELP_FRACTION * _n_blocks(n):
            return parts
        fields = csv_fields(cols, mode, stack=stack, classic=classic)
        held = 0
        while held < HELP_BYTES:
            block = self.claims.back()
            if block is None:
                break
            parts[block] = rows_bytes(fields, block * BLOCK_ROWS, min(n, (block + 1) * BLOCK_ROWS))
            held += len(parts[block])
        return parts

    def wait(self) -> Path:
        if self.proc is not None and self.conn is not None:  # set together by start_csv
            error: Optional[str] = "the CSV writer process ended without a result"
            try:
                parts = self._help()
            except Exception as exc:
                self.abort()
                raise OSError("{}: {}: {}".format(self.path, type(exc).__name__, exc)) from exc
            except BaseException:
                self.abort()
                raise
            try:
                if self.conn.poll(None):
                    error = self.conn.recv()
            except EOFError:
                pass
            self.proc.join()
            self.proc = None
            if error is not None or not self.tmp.exists():
                self._remove()
                raise OSError("{}: {}".format(self.path, error or "not written"))
            if parts:
                with safe_fs.append_file(self.tmp, "ab") as fh:
                    for block in sorted(parts):
                        fh.write(parts.pop(block))
        self.tmp.replace(self.path)
        return self.path

    def abort(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.join()
            self.proc = None
        self._remove()

    def _remove(self) -> None:
        try:
            self.tmp.unlink()
        except FileNotFoundError:
            pass


def start_csv(path: Path, cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> CsvJob:
    """Begin writing the report: in a forked process when it is large and the platform forks, else now."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    n = int(cols["verdict"].shape[0])
    if n < BACKGROUND_ROWS or "fork" not in multiprocessing.get_all_start_methods() or (os.cpu_count() or 1) < 2:
        return _inline(path, tmp, cols, mode, stack, classic)
    ctx = multiprocessing.get_context("fork")
    claims = _Claims(ctx, _n_blocks(n))
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child_conn, str(tmp), cols, mode, stack, classic, claims), daemon=True)
    proc.start()
    child_conn.close()
    return CsvJob(path, tmp, proc, parent_conn, claims, (cols, mode, stack, classic))


class CsvAppender:
    """The report written a chunk of result rows at a time (a compare too large to hold at once): the header
    first, then each chunk's rows as they come; the file appears under its name at :meth:`finish`."""

    def __init__(self, path: Path, mode: str, *, stack: bool, classic: bool) -> None:
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".partial")
        self.mode, self.stack, self.classic = mode, stack, classic
        self.fh = safe_fs.create_file(self.tmp, "wb", replace=True)
        self.fh.write(_header(mode, stack, classic))

    def add(self, cols: Dict[str, np.ndarray]) -> None:
        n = int(cols["verdict"].shape[0])
        fields = csv_fields(cols, self.mode, stack=self.stack, classic=self.classic)
        for block in range(_n_blocks(n)):
            self.fh.write(rows_bytes(fields, block * BLOCK_ROWS, min(n, (block + 1) * BLOCK_ROWS)))

    def finish(self) -> Path:
        self.fh.close()
        self.tmp.replace(self.path)
        return self.path

    def abort(self) -> None:
        self.fh.close()
        try:
            self.tmp.unlink()
        except FileNotFoundError:
            pass

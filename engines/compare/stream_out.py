"""The reports of a compare too large to hold at once, written a chunk of result rows at a time.

:class:`ResultChunks` takes each (rank, step) piece as it is compared, ranks it for first divergence and rolls it up
the module tree, and holds pieces until they pass :data:`CHUNK_ROWS` result rows; then (when more pieces follow) it
hands the chunk to a :class:`StreamingReport` (HDF5 ``results``/``tree``/``golden_only`` appended, CSV and xlsx
rows appended) and lets it go. Only the ranking entries (a few per record with an error) and the counts stay for
the summary. A compare that fits in one chunk never streams: it is written in one go as before
(:class:`engines.compare.outputs.ReportWriter`, the CSV in a background process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from engines.compare import divergence
from engines.compare.csv_out import CsvAppender
from engines.compare.hdf5_out import ResultStore
from engines.compare.outputs import write_summary
from engines.compare.verdicts import VERDICTS
from engines.compare.xlsx_out import XlsxAppender, XlsxRefused

CHUNK_ROWS = 1 << 17  # result rows held before a chunk is written (a chunk never splits a piece)


def concat(tables: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    if not tables:
        return {}
    if len(tables) == 1:
        return tables[0]
    keys = [k for k in tables[0] if all(k in t for t in tables)]
    return {k: np.concatenate([t[k] for t in tables]) for k in keys}


def concat_results(results: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """Pieces' result columns as one table; record codes count on across pieces."""
    table = concat(results)
    if len(results) > 1:
        sizes = [int(c["record_code"].max()) + 1 if len(c["record_code"]) else 0 for c in results]
        table["record_code"] = np.concatenate([c["record_code"] + off for c, off in
                                               zip(results, np.cumsum([0] + sizes[:-1]))])
    return table


class ResultChunks:
    """Compared pieces, ranked and counted; held until written (``open_stream`` None: held to the end)."""

    def __init__(self, first_divergence: bool, tree_of: Callable[[int, int], Dict[str, Optional[str]]],
                 open_stream: Optional[Callable[[Dict[str, np.ndarray]], "StreamingReport"]] = None):
        self.first_divergence = first_divergence
        self.tree_of = tree_of
        self.open_stream = open_stream
        self.stream: Optional[StreamingReport] = None
        self.pending: List[Tuple[Dict[str, np.ndarray], int, int, Dict[str, np.ndarray]]] = []
        self.pending_rows = 0
        self.written_rows = 0
        self.peak_rows = 0  # the most result rows held at once
        self.divs: List[Dict[str, np.ndarray]] = []
        self.trees: List[Dict[str, np.ndarray]] = []
        self.counts = np.zeros(len(VERDICTS), dtype=np.int64)
        self.golden_only_rows = 0
        self.first_differing: Optional[str] = None
        self.largest_error: Optional[str] = None
        self._ranked = 0  # pending pieces already ranked

    @property
    def rows(self) -> int:
        return self.written_rows + self.pending_rows

    def add(self, cols: Dict[str, np.ndarray], rank: int, step: int, golden_only: Dict[str, np.ndarray],
            more: bool) -> None:
        """One compared piece; ``more``: other pieces follow."""
        self.pending.append((cols, rank, step, golden_only))
        self.pending_rows += len(cols["verdict"])
        self.peak_rows = max(self.peak_rows, self.pending_rows)
        self.counts += np.bincount(cols["verdict"], minlength=len(VERDICTS))[:len(VERDICTS)]
        self.golden_only_rows += len(golden_only.get("golden_name", ()))
        if more and self.open_stream is not None and self.pending_rows >= CHUNK_ROWS:
            self.flush()

    def rank_pending(self) -> None:
        """First divergence and module roll-up of the pieces not ranked yet (row numbers count on from the
        rows already written)."""
        offset = self.written_rows + sum(len(c["verdict"]) for c, _, _, _ in self.pending[:self._ranked])
        for cols, rank, step, _ in self.pending[self._ranked:]:
            if self.first_divergence:
                frame = divergence.record_frame(cols)
                div = divergence.rank_records(cols, frame=frame)
                tree = divergence.module_rollup(cols, div, self.tree_of(rank, step), frame=frame)
                if self.first_differing is None:
                    self.first_differing = divergence.first_differing(cols, frame)
                if self.largest_error is None:
                    self.largest_error = divergence.largest_error(cols, frame)
                div["stack"] = cols["stack"][div["first_row"]]  # the results rows may be gone by the summary
                div["first_row"] = div["first_row"] + offset
                tree["first_row"] = np.where(tree["first_row"] >= 0, tree["first_row"] + offset, -1)
                self.divs.append(div)
                self.trees.append(tree)
            offset += len(cols["verdict"])
        self._ranked = len(self.pending)

    def table(self) -> Dict[str, np.ndarray]:
        """The pending pieces' results as one table."""
        return concat_results([c for c, _, _, _ in self.pending])

    def golden_only(self) -> Dict[str, np.ndarray]:
        return concat([g for _, _, _, g in self.pending])

    def flush(self) -> None:
        """Write the pending pieces (ranked first) and let them go."""
        if not self.pending:
            return
        self.rank_pending()
        table = self.table()
        if self.stream is None:
            self.stream = self.open_stream(table)
        self.stream.add(table, concat(self.trees), self.golden_only())
        self.written_rows += self.pending_rows
        self.pending, self.pending_rows, self._ranked, self.trees = [], 0, 0, []

    def abort(self) -> None:
        if self.stream is not None:
            self.stream.abort()
            self.stream = None


class StreamingReport:
    """HDF5, CSV and xlsx reports appended a chunk at a time. Whether the reports carry the call-stack column is
    decided by the first chunk (a dump records stacks at every step or at none)."""

    def __init__(self, out: Path, opts: Any, mode: str, first: Dict[str, np.ndarray], stamp: str):
        self.out, self.mode = out, mode
        self.classic = opts.highlight == "classic"
        self.stack = bool(np.any(first["stack"] != "")) if len(first["stack"]) else False
        self.notes: List[str] = []
        self.h5: Optional[ResultStore] = None
        self.csv: Optional[CsvAppender] = None
        self.xlsx: Optional[XlsxAppender] = None
        try:
            if "hdf5" in opts.formats:
                self.h5 = ResultStore(out, mode, "classic_colour" in first)
            if "csv" in opts.formats:
                self.csv = CsvAppender(out / "compare_result_{}.csv".format(stamp), mode, stack=self.stack,
                                       classic=self.classic)
            if "xlsx" in opts.formats:
                try:
                    self.xlsx = XlsxAppender(out / "compare_result_{}.xlsx".format(stamp), mode, stack=self.stack,
                                             classic=self.classic)
                except XlsxRefused as exc:
                    self.notes.append(str(exc))
        except BaseException:
            self.abort()
            raise

    def add(self, table: Dict[str, np.ndarray], tree: Dict[str, np.ndarray],
            golden_only: Dict[str, np.ndarray]) -> None:
        if self.h5 is not None:
            self.h5.append("results", table)
            self.h5.append("tree", tree)
            self.h5.append("golden_only", golden_only)
            self.h5.forget_objects()
        if self.csv is not None:
            self.csv.add(table)
        if self.xlsx is not None:
            try:
                self.xlsx.add(table)
            except XlsxRefused as exc:
                self.notes.append(str(exc))
                self.xlsx = None

    def finish(self, div: Dict[str, np.ndarray], summary: Dict[str, Any], events) -> Dict[str, str]:

        files: Dict[str, str] = {}
        for note in self.notes:
            summary.setdefault("notes", []).append(note)
            if events is not None:
                events.emit("message", level="warning", text=note)
        if self.h5 is not None:
            self.h5.append("divergence", div)
            files["hdf5"] = str(self.out / "compare.h5")
        if self.xlsx is not None:
            files["xlsx"] = str(self.xlsx.finish())
            self.xlsx = None
        if self.csv is not None:
            files["csv"] = str(self.csv.finish())
            self.csv = None
        if self.h5 is not None:
            self.h5.finish(summary)
            self.h5 = None
        files["summary"] = write_summary(self.out, summary, files)
        return files

    def abort(self) -> None:
        if self.csv is not None:
            self.csv.abort()
            self.csv = None
        if self.h5 is not None:
            self.h5.abort()
            self.h5 = None
        self.xlsx = None

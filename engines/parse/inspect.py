"""List, filter and inspect the records of any dump; export tensors to ``.npy``; compare two arbitrary tensors.

These are the functions behind ``probe-tui parse PATH [--name PATTERN] [--step N] [--rank R] [--nonfinite]
[--export-npy DIR] [--json]``. Everything streams: a tensor is read in chunks (histograms, exports), never a whole
dump at once.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike

from engines import safe_fs
from engines.dumps.names import direction_word
from engines.dumps.opener import open_dump
from engines.dumps.rows import IO_NAMES, KIND_NAMES, STAT_BITS, RowTable, factorize
from engines.dumps.source import DumpSource, DumpSourceError, TensorReader, require_steps
from engines.errors import JobError
from engines.safe_fs import PathLike

if TYPE_CHECKING:
    from types import EllipsisType

    from engines.compare.tensor_metrics import TensorMetrics

CHUNK = 1 << 22
LIST_LIMIT = 200


class ParseError(JobError):
    """Bad parse input: one line naming the path, row or option (exit code 2, like every JobError)."""


@dataclass
class ParseOutcome:
    """``rows`` holds the selected rows; ``summary`` is JSON-ready (``tables`` for the one-screen view)."""

    summary: Dict[str, Any]
    rows: RowTable
    exported: List[str] = field(default_factory=list)
    exit_code: int = 0


def _open(path: PathLike) -> DumpSource:
    try:
        return open_dump(path)
    except DumpSourceError as exc:
        raise ParseError(str(exc)) from None


def name_matcher(pattern: Optional[str]) -> Optional[Callable[[str], bool]]:
    """Glob when the pattern has ``*?[``, a regular expression when it starts with ``re:``, else a substring."""
    if not pattern:
        return None
    if pattern.startswith("re:"):
        try:
            rx = re.compile(pattern[3:])
        except re.error as exc:
            raise ParseError("--name {}: bad regular expression ({})".format(pattern, exc)) from None
        return lambda s: rx.search(s) is not None
    if any(c in pattern for c in "*?["):
        return lambda s: fnmatch.fnmatchcase(s, pattern)
    return lambda s: pattern in s


def _nonfinite_mask(rows: RowTable) -> np.ndarray:
    mask = rows.nonfinite > 0
    for s, bit in STAT_BITS.items():
        mask |= ((rows.valid & bit) != 0) & ~np.isfinite(getattr(rows, s))
    return mask


def _pieces(source: DumpSource, step: Optional[int], rank: Optional[int]) -> List[Tuple[int, int]]:
    """(rank, step) pieces the filters select, in rank and step order; nothing is read but the step lists."""
    try:
        require_steps(source)  # a dump the disk stopped before its first step: one line, before anything is read
    except DumpSourceError as exc:
        raise ParseError(str(exc)) from None
    ranks = source.ranks()
    if rank is not None:
        if rank not in ranks:
            raise ParseError("--rank {}: the dump has ranks {}".format(rank, ranks))
        ranks = [rank]
    out: List[Tuple[int, int]] = []
    for r in ranks:
        steps = source.steps(r)
        if step is not None:
            if step not in steps:
                continue
            steps = [step]
        out.extend((r, s) for s in steps)
    if step is not None and not out:
        raise ParseError("--step {}: not in the dump (steps: {})".format(
            step, sorted({s for r in source.ranks() for s in source.steps(r)})))
    return out


def iter_selected(source: DumpSource, *, name: Optional[str] = None, step: Optional[int] = None,
                  rank: Optional[int] = None, nonfinite: bool = False) -> Iterator[RowTable]:
    """The rows of each selected (rank, step) piece that pass the filters, one piece at a time (a piece is read
    only when the caller asks for it, so stopping early reads no more of the dump)."""
    match = name_matcher(name)
    for r, s in _pieces(source, step, rank):
        try:
            rows = source.rows(r, s)
        except DumpSourceError as exc:
            raise ParseError(str(exc)) from None
        keep = np.ones(len(rows), dtype=bool)
        if match is not None:
            keep &= _name_mask(rows, match)
        if nonfinite:
            keep &= _nonfinite_mask(rows)
        yield rows.take(keep)


def _name_mask(rows: RowTable, match: Callable[[str], bool]) -> np.ndarray:
    """Rows whose name matches, testing each distinct name once (a name repeats in every step)."""
    codes, uniq = factorize(rows.name)
    hit = np.fromiter((match(n) for n in uniq.tolist()), bool, len(uniq))
    return hit[codes] if len(uniq) else np.zeros(0, dtype=bool)


def select_rows(source: DumpSource, *, name: Optional[str] = None, step: Optional[int] = None,
                rank: Optional[int] = None, nonfinite: bool = False) -> RowTable:
    """Rows of every (rank, step) of ``source`` that pass the filters, in rank, step, dump order."""
    return RowTable.concat(list(iter_selected(source, name=name, step=step, rank=rank, nonfinite=nonfinite)))


def _stat(v: float) -> Union[float, str, None]:
    """A statistic for JSON: None for NaN, ``"inf"``/``"-inf"`` for infinities."""
    return None if math.isnan(v) else (v if math.isfinite(v) else ("inf" if v > 0 else "-inf"))


def row_dict(rows: RowTable, i: int) -> Dict[str, Any]:
    """One row as a JSON-ready dict."""
    out: Dict[str, Any] = {"name": rows.name[i], "record": rows.record[i], "slot": rows.slot[i], "rank": int(rows.rank[i]),
           "step": int(rows.step[i]), "kind": KIND_NAMES[int(rows.kind[i])], "io": IO_NAMES[int(rows.io[i])],
           "direction": direction_word(int(rows.direction[i])), "dtype": rows.dtype[i], "shape": rows.shape[i],
           "has_data": bool(rows.data[i] >= 0)}
    for s, bit in STAT_BITS.items():
        out[s] = _stat(float(getattr(rows, s)[i])) if rows.valid[i] & bit else None
    if rows.text[i] is not None:
        out["value"] = rows.text[i]
    if rows.crc32[i]:
        out["crc32"] = rows.crc32[i]
    if rows.nonfinite[i] >= 0:
        out["nonfinite"] = int(rows.nonfinite[i])
    return out


def parse(path: PathLike, *, name: Optional[str] = None, step: Optional[int] = None, rank: Optional[int] = None,
          nonfinite: bool = False, export_npy: Optional[PathLike] = None, limit: int = LIST_LIMIT) -> ParseOutcome:
    """List (and optionally export) the rows of the dump at ``path`` that pass the filters.

    The dump is read one (rank, step) piece at a time, and only as far as needed: once more than ``limit`` rows
    are selected the listing is full and reading stops (``summary["complete"]`` is then False and the counts cover
    the pieces read; ``read_pieces`` says how many of ``pieces``). ``export_npy`` reads every selected piece and
    exports its tensors as it goes. Memory holds one piece and the listed rows, whatever the dump's length."""
    source = _open(path)
    try:
        pieces = _pieces(source, step, rank)
        kept: List[RowTable] = []
        n_kept = n_rows = n_records = n_nonfinite = read = 0
        exported: List[str] = []
        exported_pieces: Set[Tuple[int, int]] = set()
        complete = True
        for rows in iter_selected(source, name=name, step=step, rank=rank, nonfinite=nonfinite):
            read += 1
            n_rows += len(rows)
            n_records += len(rows.record_order())
            n_nonfinite += int(_nonfinite_mask(rows).sum())
            if export_npy and len(rows):
                done = export_rows(source, rows, Path(export_npy), multi=len(pieces) > 1)
                if done:
                    exported_pieces.add((int(rows.rank[0]), int(rows.step[0])))
                exported += done
            if n_kept <= limit and len(rows):
                part = rows if n_kept + len(rows) <= limit + 1 else rows.take(np.arange(limit + 1 - n_kept))
                kept.append(part)
                n_kept += len(part)
            if n_kept > limit and not export_npy and read < len(pieces):
                complete = False
                break
        if export_npy and len(exported_pieces) == 1 and len(pieces) > 1:  # all from one piece: no sub-folders
            exported = _flatten_export(Path(export_npy), exported)
        rows = RowTable.concat(kept)
        listed = [row_dict(rows, i) for i in range(min(len(rows), limit))]
        summary = {
            "path": str(path), "origin": source.origin, "framework": source.framework,
            "ranks": source.ranks(), "steps": sorted({s for r in source.ranks() for s in source.steps(r)}),
            "holds": source.holds(), "rows": n_rows, "records": n_records,
            "nonfinite_rows": n_nonfinite, "listed": listed, "complete": complete,
            "pieces": len(pieces), "read_pieces": read, "exported": len(exported),
            "tables": [_rows_table(rows, limit)],
        }
        notes = source.notes()
        if notes:
            summary["notes"] = notes
        if export_npy:
            summary["export_dir"] = str(export_npy)
        return ParseOutcome(summary=summary, rows=rows, exported=exported)
    finally:
        source.close()


def _rows_table(rows: RowTable, limit: int) -> Dict[str, Any]:
    out: List[List[Any]] = []
    for i in range(min(len(rows), limit)):
        vals = ["{:.4g}".format(getattr(rows, s)[i]) if rows.valid[i] & bit else "-"
                for s, bit in STAT_BITS.items()]
        out.append([rows.name[i], int(rows.rank[i]), int(rows.step[i]), rows.dtype[i], rows.shape[i]] + vals)
    return {"title": "rows", "columns": ["name", "rank", "step", "dtype", "shape", "max", "min", "mean", "norm"],
            "rows": out, "max_rows": limit}  # the listing is already cut to the limit: a viewer shows it all


# -- tensors ---------------------------------------------------------------------------------------------------
def _reader(source: DumpSource, rows: RowTable, i: int) -> TensorReader:
    return source.tensor_spec(int(rows.rank[i]), int(rows.step[i])).open()


def find_row(source: DumpSource, row_name: str, *, rank: Optional[int] = None,
             step: Optional[int] = None) -> Tuple[RowTable, int]:
    """The first piece (rank, step order) holding a row named ``row_name``, and the row's position in it; pieces
    after it are not read."""
    for rows in iter_selected(source, rank=rank, step=step):
        hits = np.flatnonzero(rows.name == row_name)
        if hits.size:
            return rows, int(hits[0])
    raise ParseError("{}: no row named {!r}{}".format(source.path, row_name,
                                                      "" if step is None else " at step {}".format(step)))


def read_tensor(path: PathLike, row_name: str, *, rank: Optional[int] = None, step: Optional[int] = None) -> np.ndarray:
    """The full tensor of a row (bfloat16 as float32)."""
    source = _open(path)
    try:
        rows, i = find_row(source, row_name, rank=rank, step=step)
        if rows.data[i] < 0:
            raise ParseError("{}: row {!r} has statistics only, no tensor data".format(path, row_name))
        reader = _reader(source, rows, i)
        try:
            _, numel, _ = reader.info(int(rows.data[i]))
            flat = reader.read(int(rows.data[i]), 0, numel)
        finally:
            reader.close()
        shape = json_shape(rows.shape[i])
        return flat.reshape(shape) if shape is not None and int(np.prod(shape)) == flat.size else flat
    finally:
        source.close()


def json_shape(text: str) -> Optional[Tuple[int, ...]]:
    from engines.dumps.rows import parse_shape

    return parse_shape(text)


_SLICE = re.compile(r"^\s*(-?\d+)?\s*(?::\s*(-?\d+)?\s*(?::\s*(-?\d+)?\s*)?)?$")


def parse_index(text: str) -> Tuple[Union[int, slice, EllipsisType], ...]:
    """``"0, 1:5, ::2"`` -> a numpy index tuple (no eval)."""
    out: List[Union[int, slice, EllipsisType]] = []
    for part in text.split(","):
        part = part.strip()
        if part == "...":
            out.append(Ellipsis)
            continue
        m = _SLICE.match(part)
        if not m or part == "":
            raise ParseError("index {!r}: use integers and slices like 0, 1:5, ::2".format(text))
        if ":" not in part:
            out.append(int(m.group(1)))
        else:
            a, b, c = (int(g) if g not in (None, "") else None for g in m.groups())
            out.append(slice(a, b, c))
    return tuple(out)


def tensor_slice(path: PathLike, row_name: str, index: str, **where: Optional[int]) -> np.ndarray:
    """``tensor[index]`` of a row (``index`` like ``"0, :4"``)."""
    arr = read_tensor(path, row_name, **where)
    try:
        return arr[parse_index(index)]
    except IndexError as exc:
        raise ParseError("index {!r} on shape {}: {}".format(index, list(arr.shape), exc)) from None


@dataclass
class Histogram:
    counts: np.ndarray
    edges: np.ndarray
    nan: int
    posinf: int
    neginf: int
    zeros: int = 0
    log: bool = False


def histogram(path: PathLike, row_name: str, *, bins: int = 32, log: bool = False,
              **where: Optional[int]) -> Histogram:
    """Histogram of a row's finite values (two passes over the tensor in chunks: range, then counts).

    ``log`` bins ``log10(|x|)`` of the non-zero values instead (magnitudes, useful for underflow/overflow).
    """
    source = _open(path)
    try:
        rows, i = find_row(source, row_name, **where)
        if rows.data[i] < 0:
            raise ParseError("{}: row {!r} has statistics only, no tensor data".format(path, row_name))
        reader = _reader(source, rows, i)
        try:
            return tensor_histogram(reader, int(rows.data[i]), bins=bins, log=log)
        finally:
            reader.close()
    finally:
        source.close()


def tensor_histogram(reader: TensorReader, loc: int, *, bins: int = 32, log: bool = False) -> Histogram:
    """The histogram of one stored tensor, read from a dump source's tensor reader (``info(loc)``,
    ``read(loc, start, stop)``) in chunks: a pass for the range, one for the counts. NaN, ±inf and zeros are
    counted on the values themselves (before ``log`` takes ``log10(|x|)`` of the finite non-zero ones)."""
    _, numel, _ = reader.info(loc)

    def chunks() -> Iterator[np.ndarray]:
        for lo in range(0, numel, CHUNK):
            yield reader.read(loc, lo, min(numel, lo + CHUNK)).astype(np.float64)

    lo_v, hi_v, nan, pinf, ninf, zeros = math.inf, -math.inf, 0, 0, 0, 0
    for x in chunks():
        nan += int(np.isnan(x).sum())
        pinf += int(np.isposinf(x).sum())
        ninf += int(np.isneginf(x).sum())
        zeros += int((x == 0).sum())
        fin = _binned_values(x, log)
        if fin.size:
            lo_v, hi_v = min(lo_v, float(fin.min())), max(hi_v, float(fin.max()))
    if not math.isfinite(lo_v):
        lo_v, hi_v = 0.0, 1.0
    edges = np.linspace(lo_v, hi_v if hi_v > lo_v else lo_v + 1.0, bins + 1)
    counts = np.zeros(bins, dtype=np.int64)
    for x in chunks():
        counts += np.histogram(_binned_values(x, log), bins=edges)[0]
    return Histogram(counts, edges, nan, pinf, ninf, zeros, log)


def _binned_values(x: np.ndarray, log: bool) -> np.ndarray:
    fin = x[np.isfinite(x)]
    if log:
        fin = fin[fin != 0]
        return np.log10(np.abs(fin))
    return fin


def _safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:240]


def export_rows(source: DumpSource, rows: RowTable, folder: Path, multi: Optional[bool] = None) -> List[str]:
    """Write each selected row that has tensor data to ``folder/<row name>.npy`` (streamed; bfloat16 as float32).
    Several ranks or steps (``multi``; by default: whether ``rows`` span several) get ``rank<R>/step<S>/``
    sub-folders."""
    try:
        safe_fs.make_dirs(folder)
    except OSError as exc:
        raise ParseError("--export-npy {}".format(safe_fs.describe_os_error(folder, exc))) from None
    if multi is None:
        multi = len(set(zip(rows.rank.tolist(), rows.step.tolist()))) > 1
    written: List[str] = []
    readers: Dict[Tuple[int, int], TensorReader] = {}
    try:
        for i in np.flatnonzero(rows.data >= 0):
            key = (int(rows.rank[i]), int(rows.step[i]))
            reader = readers.get(key)
            if reader is None:
                reader = readers[key] = source.tensor_spec(*key).open()
            loc = int(rows.data[i])
            dtype, numel, _ = reader.info(loc)
            shape = json_shape(rows.shape[i])
            if shape is None or int(np.prod(shape)) != numel:
                shape = (numel,)
            out_dir = folder / "rank{}".format(key[0]) / "step{}".format(key[1]) if multi else folder
            if out_dir != folder:
                safe_fs.make_dirs(out_dir)
            target = out_dir / (_safe_file_name(rows.name[i]) + ".npy")
            with safe_fs.atomic_file(target, "wb") as fh:  # mode 0o640, never through a planted link
                _write_npy(fh, np.dtype(dtype), tuple(shape), numel, reader, loc)
            written.append(str(target))
    finally:
        for r in readers.values():
            r.close()
    return written


def _write_npy(fh: IO[bytes], dtype: np.dtype, shape: Tuple[int, ...], numel: int, reader: TensorReader,
               loc: int) -> None:
    """A ``.npy`` file streamed ``CHUNK`` elements at a time from the reader."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(fh, header)
    except ValueError:  # a header over 64 KiB (a shape of thousands of dimensions)
        np.lib.format.write_array_header_2_0(fh, header)
    for lo in range(0, numel, CHUNK):
        hi = min(numel, lo + CHUNK)
        fh.write(np.ascontiguousarray(np.asarray(reader.read(loc, lo, hi)).reshape(-1), dtype=dtype).tobytes())


def _flatten_export(folder: Path, files: List[str]) -> List[str]:
    """Move the files of a one-piece export from its ``rank<R>/step<S>/`` sub-folder up into ``folder``."""
    out: List[str] = []
    for f in files:
        src = Path(f)
        dst = folder / src.name
        src.replace(dst)
        out.append(str(dst))
    for sub in {Path(f).parent for f in files}:
        for d in (sub, sub.parent):
            try:
                d.rmdir()
            except OSError:
                pass
    return out


# -- comparing two arbitrary tensors -------------------------------------------------------------------------
@dataclass
class TensorComparison:
    """msprobe's parse ``cn`` (docs/reference/msprobe-analysis.md §5.1) plus our metrics."""

    allclose: bool
    cosine: float
    error_ratio: float
    errors: int
    total: int
    padded: bool
    first_errors: List[Tuple[int, float, float, float]]  # (index, a, b, |a-b|)
    metrics: TensorMetrics  # of the two arrays as given

    def as_dict(self) -> Dict[str, Any]:
        m = self.metrics
        return {"allclose": self.allclose, "cosine": self.cosine, "error_ratio": self.error_ratio,
                "errors": self.errors, "total": self.total, "padded": self.padded,
                "first_errors": [list(e) for e in self.first_errors],
                "rel_err": m.rel_err, "max_abs_err": m.max_abs_err, "max_rel_err": m.max_rel_err,
                "one_thousandth": m.one_thousandth, "five_thousandths": m.five_thousandths}


def compare_tensors(a: ArrayLike, b: ArrayLike, *, rtol: float = 1e-3, atol: float = 1e-3, show: int = 20) -> TensorComparison:
    """Compare two arrays like msprobe's ``cn``: cast to float32 and flatten, zero-pad the shorter one;
    ``allclose`` with rtol/atol; an element is an error when ``|a−b| > atol + rtol·|b|``."""
    from engines.compare.tensor_metrics import compare_arrays

    a = np.asarray(a)
    b = np.asarray(b)
    metrics = compare_arrays(a, b) if a.shape == b.shape else compare_arrays(a.reshape(-1)[:0], b.reshape(-1)[:0])
    x = a.astype(np.float32).reshape(-1)
    y = b.astype(np.float32).reshape(-1)
    padded = x.size != y.size
    if padded:
        n = max(x.size, y.size)
        x = np.pad(x, (0, n - x.size))
        y = np.pad(y, (0, n - y.size))
    allclose = bool(np.allclose(x, y, rtol=rtol, atol=atol))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    denom = math.sqrt(float(np.dot(x64, x64))) * math.sqrt(float(np.dot(y64, y64)))
    cosine = float(np.dot(x64, y64)) / denom if denom else math.nan
    diff = np.abs(x - y)
    bad = diff > atol + rtol * np.abs(y)
    idx = np.flatnonzero(bad)
    first = [(int(i), float(x[i]), float(y[i]), float(diff[i])) for i in idx[:show]]
    total = int(x.size)
    return TensorComparison(allclose, cosine, (idx.size / total) if total else 0.0, int(idx.size), total, padded,
                            first, metrics)

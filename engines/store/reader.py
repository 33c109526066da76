"""``StoreReader``: committed rows and tensors of one store, from a finished run, a live SWMR file, per-step
segments, or the files of a writer that was killed. Only committed rows are ever returned."""

import json
import os
import socket
import time
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from engines.safe_fs import PathLike

from . import live, validate
from .announce import SEGMENTS_FILE, kinds_in, read_events
from .closing import Closing
from .errors import StoreError, StoreWarning
from .fs import filesystem_type, is_network_fs
from .gather import Ranges, merge_ranges, plan_points, plan_ranges, ranges_to_indices, unique_inverse
from .segment import commit_check
from .segment_files import SegmentFiles
from .spec import FORMAT_VERSION, STRINGS_KEY, TableSpec, TensorRef, pool_key, table_key

RowSelection = Union[None, slice, Sequence[int], np.ndarray]
TEXT_CACHE = 1 << 16  # decoded strings a reader keeps (cleared when full)


class StoreReader(Closing):
    """Read the ``kind`` store in ``directory`` (a rank folder; or one ``.h5`` file). ``kind`` may be left out
    when the folder holds a single store."""

    def __init__(self, directory: PathLike, kind: Optional[str] = None) -> None:
        path = Path(directory)
        live.settle(path)  # a writer process of this process: its handed-over steps first
        self._single_file: Optional[Path] = None
        if path.is_file():
            self._single_file, path = path, path.parent
        elif not path.is_dir():
            raise StoreError(f"{path}: no such folder")
        self.directory = path
        self._files = SegmentFiles(locking=not is_network_fs(filesystem_type(path)))
        self._segments = self._files.segments
        self._steps: List[int] = []
        self._counts: List[np.ndarray] = []
        self._infos: List[Any] = []
        self._seg_of_commit: List[int] = []
        self._events_offset = 0
        self._status: Optional[str] = None
        self._closed_commits: Optional[int] = None  # the commits the writer says it made (its close line)
        self._unclosed = False
        self._open_event: Dict[str, Any] = {}
        self._bounds_cache: Dict[str, Any] = {}
        self._text_cache: Dict[int, str] = {}
        if self._single_file is not None:
            self._init_single_file(kind)
        else:
            self._init_folder(kind)
        self._files.on_open = self._check_file
        self._refresh_swmr()
        self._warn_lost_commits()

    # -- opening -------------------------------------------------------------------------------------------
    def _init_folder(self, kind: Optional[str]) -> None:
        kinds = kinds_in(self.directory)
        if not kinds:
            raise StoreError(f"{self.directory}: no probe-tui store here (no {SEGMENTS_FILE}, no <kind>.h5)")
        if kind is None:
            if len(kinds) > 1:
                raise StoreError(f"{self.directory}: holds several stores ({', '.join(kinds)}); name the kind")
            kind = kinds[0]
        elif kind not in kinds:
            raise StoreError(f"{self.directory}: no {kind!r} store (it holds: {', '.join(kinds)})")
        self.kind = kind
        events, self._events_offset = read_events(self.directory)
        opened = [ev for ev in events if ev.get("kind") == kind and ev.get("event") == "open"]
        if not opened:  # <kind>.h5 without its announcement: a SWMR file copied alone, or killed just after open
            self._single_file = self.directory / f"{kind}.h5"
            self._init_single_file(kind)
            return
        self._open_event = opened[0]
        self._arrays, meta, self._tables = validate.open_event(
            self._open_event, f"{self.directory / SEGMENTS_FILE}: the {kind!r} store's open line")
        self._meta_attrs = dict(meta)
        if self._open_event.get("mode") == "swmr":
            self._files.add(self.directory / self._open_event["file"], True,
                            np.zeros(len(self._arrays), dtype=np.int64))
        self._take_events(events)
        if self._status is not None and self._status != "running" and not self._unclosed:  # its writer closed it
            for seg in self._segments:
                seg.live = False

    def _init_single_file(self, kind: Optional[str]) -> None:
        path = self._single_file
        assert path is not None
        live = False
        try:
            try:
                f = self._files.open_file(path, swmr=False)  # closed by its writer: read plainly
            except OSError as exc:
                if "already open for write" not in str(exc):
                    raise
                live = True  # a writer holds it, or was killed holding it
                f = self._files.open_file(path, swmr=True)
        except (OSError, StoreError) as exc:
            raise StoreError(f"{path}: not a readable probe-tui store ({exc})") from None
        try:
            try:
                meta = dict(f["meta"].attrs)
                commit_attrs = dict(f["commits"].attrs)
            except (KeyError, OSError, RuntimeError) as exc:
                raise StoreError(f"{path}: not a probe-tui store (no readable /meta or /commits: {exc})") from None
            validate.file_meta(f, kind, path)
            self._tables = validate.parse_tables(meta.pop("tables", None), f"{path} /meta")
            self._arrays = validate.arrays_list(commit_attrs.get("arrays"), self._tables, f"{path} /commits")
            base = validate.int_list(commit_attrs.get("base"), len(self._arrays), f"{path} /commits", "base")
        except StoreError:
            f.close()
            raise
        if base.any():
            f.close()
            raise StoreError(f"{path}: one per-step segment of a store; open its folder, {path.parent}")
        s = self._files.add(path, True, base)
        self._segments[s].live = live
        self._files.adopt(s, f)
        self.kind = str(_plain(meta.get("kind", kind or "")))
        self._meta_attrs = {k: _plain(v) for k, v in meta.items()}

    def _check_file(self, f: Any, segment: Any) -> None:
        """Each segment file, when opened: its own format version and kind (a file swapped in, or rewritten by
        a newer probe-tui, is refused even when ``segments.jsonl`` describes it)."""
        validate.file_meta(f, self.kind, segment.path, self._meta_attrs if self._open_event else None)

    def _warn_lost_commits(self) -> None:
        made = self._closed_commits
        if made is not None and made > len(self._steps):
            warnings.warn(f"{self.directory}: the {self.kind!r} writer made {made} commit(s), {len(self._steps)} "
                          f"can be read (the rest is damaged or missing)", StoreWarning, stacklevel=3)

    # -- commit log ----------------------------------------------------------------------------------------
    def _take_events(self, events: List[Dict[str, Any]]) -> bool:
        new = False
        for ev in events:
            if ev.get("kind") != self.kind:
                continue
            if ev.get("event") == "segment":
                name, step, base, counts, info = validate.segment_event(
                    ev, len(self._arrays), f"{self.directory / SEGMENTS_FILE}: a {self.kind!r} segment line")
                self._files.add(self.directory / name, False, base)
                self._add_commit(step, counts, info, len(self._segments) - 1)
                new = True
            elif ev.get("event") == "close":
                self._status = str(ev.get("status", "finished"))
                commits = ev.get("commits")
                self._closed_commits = commits if isinstance(commits, int) and not isinstance(commits, bool) \
                    else None
                self._unclosed = bool(ev.get("unclosed"))  # let go of after a failed write: still SWMR-flagged
        return new

    def _add_commit(self, step: int, counts: np.ndarray, info: Any, segment: int) -> None:
        self._steps.append(step)
        self._counts.append(counts)
        self._infos.append(info)
        self._seg_of_commit.append(segment)
        self._bounds_cache.clear()
        self._files.grew()

    def _refresh_swmr(self) -> bool:
        new = False
        for s, seg in enumerate(self._segments):
            if not seg.swmr:
                continue
            parts = validate.commit_log(self._files.file(s), len(self._arrays), seg.path)
            try:
                if seg.live:
                    for d in parts:
                        d.refresh()
                n = min(d.shape[0] for d in parts)
                if n <= seg.seen:
                    continue
                steps, infos, counts, checks = (d[seg.seen:n] for d in parts)
            except (OSError, ValueError, RuntimeError) as exc:
                raise StoreError(f"{seg.path}: the commit log is damaged ({exc})") from None
            for i in range(len(steps)):
                if commit_check(int(steps[i]), int(infos[i]), counts[i]) != int(checks[i]):
                    break  # a commit row the writer did not finish: it and anything after are not committed
                self._add_commit(int(steps[i]), counts[i].astype(np.int64), int(infos[i]), s)
                seg.seen += 1
                new = True
        return new

    def refresh(self) -> bool:
        """Take in commits made since the last look; True when there are new ones."""
        new = False
        if self._single_file is None:
            events, self._events_offset = read_events(self.directory, self._events_offset)
            new = self._take_events(events)
        return self._refresh_swmr() or new

    def follow(self, poll_s: float = 0.5, timeout_s: Optional[float] = None) -> Iterator[List[int]]:
        """Yield lists of newly committed steps (first those already there) until the writer closes or dies,
        or ``timeout_s`` passes without a new commit."""
        seen = 0
        last_news = time.monotonic()
        while True:
            if len(self._steps) > seen:
                yield self._steps[seen:]
                seen = len(self._steps)
                last_news = time.monotonic()
            if self.status != "running":
                self.refresh()
                if len(self._steps) > seen:
                    continue  # the last commits, then stop
                return
            if timeout_s is not None and time.monotonic() - last_news > timeout_s:
                return
            time.sleep(poll_s)
            self.refresh()

    # -- what is there -------------------------------------------------------------------------------------
    @property
    def meta(self) -> Dict[str, Any]:
        out = {k: _plain(v) for k, v in self._meta_attrs.items() if k != "tables"}
        out.setdefault("format_version", FORMAT_VERSION)
        try:
            out["run_meta"] = json.loads(out.get("run_meta") or "{}")
        except (TypeError, ValueError):
            pass
        return out

    @property
    def status(self) -> str:
        """``finished``/``failed``/... as the writer closed; ``running``; ``killed`` (the writer process is gone
        without closing, same host); ``unknown`` (a lone file)."""
        if self._status is None and self._single_file is None:  # a close line may have come since
            events, self._events_offset = read_events(self.directory, self._events_offset)
            self._take_events(events)
        if self._status is not None:
            return self._status
        ev = self._open_event
        if not ev:
            return "unknown"
        if ev.get("host") == socket.gethostname() and not _pid_alive(int(ev.get("pid", -1))):
            return "killed"
        return "running"

    @property
    def mode(self) -> str:
        return str(self._meta_attrs.get("mode", "swmr"))

    def tables(self) -> List[str]:
        return list(self._tables)

    def table_spec(self, table: str) -> TableSpec:
        spec = self._tables.get(table)
        if spec is None:
            raise StoreError(f"{self.directory}: the {self.kind!r} store has no table {table!r} "
                             f"(tables: {', '.join(self._tables)})")
        return spec

    def steps(self) -> List[int]:
        """Committed steps, in commit order, each once."""
        return list(dict.fromkeys(self._steps))

    def commits(self) -> List[Dict[str, Any]]:
        """One entry per commit: its step and the ``info`` given to ``commit``."""
        ids = [i for i in self._infos if isinstance(i, (int, np.integer)) and i >= 0]  # SWMR: string ids
        texts = dict(zip(ids, self.decode(np.array(ids, dtype=np.int64)).tolist())) if ids else {}
        out = []
        for step, info in zip(self._steps, self._infos):
            if isinstance(info, (int, np.integer)):
                info = json.loads(texts[info]) if info >= 0 else {}
            out.append({"step": step, "info": info})
        return out

    def _committed(self, key: str) -> int:
        return int(self._counts[-1][self._arrays.index(key)]) if self._counts else 0

    def num_rows(self, table: str) -> int:
        self.table_spec(table)
        return self._committed(table_key(table))

    # -- reading -------------------------------------------------------------------------------------------
    def _bounds(self, key: str) -> Tuple[np.ndarray, np.ndarray]:
        """Per segment (base, end) of a global array, from the commit log."""
        cached = self._bounds_cache.get(key)
        if cached is not None:
            return cached
        k = self._arrays.index(key)
        base = np.array([seg.base[k] for seg in self._segments], dtype=np.int64)
        end = base.copy()
        steps, counts, seg_of = self._log()
        if len(seg_of):
            last = np.flatnonzero(np.diff(seg_of, append=-1) != 0)  # each segment's last commit
            end[seg_of[last]] = counts[last, k]
        self._bounds_cache[key] = (base, end)
        return base, end

    def _log(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The commit log as arrays: steps (C,), counts (C x arrays), segment of each commit (C,)."""
        cached = self._bounds_cache.get("")
        if cached is None:
            n = len(self._arrays)
            counts = np.array(self._counts, dtype=np.int64).reshape(-1, n)
            cached = self._bounds_cache[""] = (np.array(self._steps, dtype=np.int64), counts,
                                               np.array(self._seg_of_commit, dtype=np.int64))
        return cached

    def _gather(self, key: str, specs: Sequence[Tuple[str, Any, Tuple[int, ...]]], ranges: Optional[Ranges] = None,
                points: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Read datasets ``(path, dtype, tail shape)`` that all follow global array ``key``, at global ``ranges``
        or ``points``; each segment touched is visited once for all of them."""
        base, end = self._bounds(key)
        try:
            if points is not None:
                n, inverse, pieces = plan_points(points, base, end)
                outs = [np.empty((n,) + tail, dtype=dtype) for _, dtype, tail in specs]
                for p in pieces:
                    for out, (path, _, _) in zip(outs, specs):
                        d = self._files.need(p.segment, path)
                        out[p.dest] = d[p.take] if p.lo < 0 else self._span(d, p, path)[p.take]
                return [out[inverse] for out in outs]
            parts: List[List[np.ndarray]] = [[] for _ in specs]
            for p in plan_ranges(ranges or [], base, end):
                for lst, (path, _, _) in zip(parts, specs):
                    lst.append(self._span(self._files.need(p.segment, path), p, path))
        except (OSError, ValueError, TypeError, IndexError, RuntimeError) as exc:  # a damaged file: h5py says so
            raise StoreError(f"{self.directory}: reading {key} failed ({exc})") from None
        return [np.concatenate(lst) if len(lst) > 1 else lst[0] if lst else np.empty((0,) + tail, dtype=dtype)
                for lst, (_, dtype, tail) in zip(parts, specs)]

    def _span(self, d: Any, p: Any, path: str) -> np.ndarray:
        """Local elements ``[p.lo, p.hi)``; a dataset shorter than the commit log says (a damaged or swapped file)
        is refused, not read short."""
        got = d[p.lo:p.hi]
        if got.shape[0] != p.hi - p.lo:
            raise StoreError(f"{self._segments[p.segment].path}: {path} holds {d.shape[0]} element(s), the commit "
                             f"log says {p.hi}")
        return got

    def _selection(self, table: str, rows: RowSelection, steps: Optional[Sequence[int]]
                   ) -> Tuple[Optional[Ranges], Optional[np.ndarray]]:
        """``(ranges, None)`` or ``(None, indices)`` of committed global rows."""
        n = self.num_rows(table)
        ranges: Optional[Ranges] = [(0, n)]
        if steps is not None:
            log_steps, counts, _ = self._log()
            ends = counts[:, self._arrays.index(table_key(table))]
            starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
            hit = np.isin(log_steps, np.atleast_1d(np.asarray(steps, dtype=np.int64)))
            ranges = merge_ranges(list(zip(starts[hit].tolist(), ends[hit].tolist())))
        if rows is None:
            return ranges, None
        if isinstance(rows, slice):
            idx = np.arange(n, dtype=np.int64)[rows]
        else:
            idx = np.asarray(rows, dtype=np.int64).reshape(-1)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise StoreError(f"rows: row {int(idx.max() if idx.max() >= n else idx.min())} is outside "
                                 f"table {table!r} ({n} committed rows)")
        if steps is not None:
            idx = idx[np.isin(idx, ranges_to_indices(ranges or []))]
        return None, idx

    def read(self, table: str, columns: Optional[Sequence[str]] = None, rows: RowSelection = None,
             steps: Optional[Sequence[int]] = None, *, decode: bool = True,
             with_row: bool = False) -> Dict[str, np.ndarray]:
        """Columns of committed rows: all rows, ``rows`` (global row numbers or a slice) and/or the rows of
        ``steps``. ``str``/``json`` columns come back as object arrays of Python strings (``decode=False``:
        their int64 string ids). ``with_row`` adds ``"row"``, the global row numbers."""
        spec = self.table_spec(table)
        names = spec.column_names if columns is None else list(columns)
        ranges, idx = self._selection(table, rows, steps)
        key = table_key(table)
        cols = [spec.column(name) for name in names]
        specs = [(f"{key}/{c.name}", c.storage_dtype, () if c.width is None else (c.width,)) for c in cols]
        out: Dict[str, np.ndarray] = {}
        for col, values in zip(cols, self._gather(key, specs, ranges, idx)):
            out[col.name] = self.decode(values) if col.is_text and decode else values
        if with_row:
            out["row"] = ranges_to_indices(ranges or []) if idx is None else idx
        return out

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """String ids to an object array of str, decoding each distinct id once (-1 gives "")."""
        ids = np.asarray(ids, dtype=np.int64)
        uniq, inverse = unique_inverse(ids)
        texts = np.empty(len(uniq), dtype=object)
        valid = uniq >= 0
        texts[~valid] = ""
        good = uniq[valid]
        if good.size:
            if good[-1] >= self._committed(STRINGS_KEY):
                raise StoreError(f"{self.directory}: string id {int(good[-1])} is not committed")
            texts[valid] = self._cached_texts(good)
        return texts[inverse].reshape(ids.shape)

    def _cached_texts(self, ids: np.ndarray) -> List[str]:
        """Texts of sorted distinct ids, through a bounded cache: the steps of a dump name the same records,
        slots and dtypes (one interned id each), so reading step after step decodes them once and hands out the
        same ``str`` objects (which later grouping by identity relies on)."""
        cache = self._text_cache
        keys = ids.tolist()
        missing = [i for i in keys if i not in cache]
        if missing:
            if len(cache) + len(missing) > TEXT_CACHE:
                cache.clear()
            cache.update(zip(missing, self._decode_ids(np.array(missing, dtype=np.int64))))
        return [cache[i] for i in keys]

    def _decode_ids(self, ids: np.ndarray) -> List[str]:
        base, end = self._bounds(STRINGS_KEY)
        offsets, lengths = self._gather(STRINGS_KEY, [("strings/offset", np.int64, ()),
                                                      ("strings/length", np.int64, ())], points=ids)
        seg_of = np.searchsorted(end, ids, side="right")
        out: List[str] = []
        bounds = np.flatnonzero(np.diff(seg_of)) + 1
        for part in np.split(np.arange(len(ids)), bounds):
            s = int(seg_of[part[0]])
            off, ln = offsets[part], lengths[part]
            lo, hi = int(off.min()), int((off + ln).max())
            data = self._files.need(s, "strings/data")
            if lo < 0 or hi > data.shape[0] or (ln < 0).any():
                raise StoreError(f"{self._segments[s].path}: string offsets point outside /strings/data")
            blob = data[lo:hi].tobytes()
            out.extend(blob[o:o + n].decode("utf-8", "surrogatepass") for o, n in zip((off - lo).tolist(),
                                                                                     ln.tolist()))
        return out

    def read_array(self, ref: Union[TensorRef, Mapping[str, Any]]) -> np.ndarray:
        """A stored tensor in its storage dtype and shape (bfloat16 comes back as uint16 bits: see
        ``engines.store.as_float32``)."""
        if isinstance(ref, TensorRef):
            pool, offset, numel, shape = ref.pool, ref.offset, ref.numel, ref.shape
        else:
            pool, offset, numel = str(ref["pool"]), int(ref["offset"]), int(ref["numel"])
            shape = ref["shape"]
            shape = tuple(json.loads(shape)) if isinstance(shape, str) else tuple(shape)
        if not pool or offset < 0:
            raise StoreError("read_array: this tensor was not stored (no pool)")
        key = pool_key(pool)
        if key not in self._arrays:
            raise StoreError(f"read_array: unknown pool {pool!r}")
        if offset + numel > self._committed(key):
            raise StoreError(f"read_array: {pool} elements {offset}..{offset + numel} are not committed")
        data = self._gather(key, [(key, np.dtype(pool), ())], ranges=[(offset, offset + numel)])[0]
        return data.reshape(shape)

    def close(self) -> None:
        self._files.close()

    def __repr__(self) -> str:
        return f"StoreReader({str(self.directory)!r}, kind={self.kind!r}, steps={len(self._steps)})"


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


"""A probe-tui dump (HDF5 store, docs/FORMAT.md) as a :class:`~engines.dumps.source.DumpSource`.

Accepts a run folder (``run.json`` + ``rank<R>/``), its ``latest`` pointer, a dump_path holding ``latest``, or one
rank folder. Rows come from the ``tensors`` table joined to ``records``; non-tensor arguments kept in the records'
``args`` JSON become scalar rows (``input.eps``) like msprobe's, so a changed scalar is compared too.
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from engines.dumps.rows import (
    IO_INPUT,
    IO_OTHER,
    IO_OUTPUT,
    IO_PARAM,
    IO_PARAM_GRAD,
    KIND_PARAM_GRAD,
    RowBuilder,
    RowTable,
    factorize,
)
from engines.dumps.scalars import scalar_fields
from engines.dumps.source import DumpSource, DumpSourceError, guarded, reading
from engines.dumps.stack_frames import user_frames

if TYPE_CHECKING:
    from engines.store import DumpReader, StoreReader

DUMP_KIND = "dump"
V_CRC32, V_XHASH = 16, 32
_RANK_DIR = re.compile(r"^rank(\d+)$")
_TENSOR_MARK = re.compile(r'\{"tensor":\s*"[^"]*"\}|"[A-Za-z_][A-Za-z0-9_]*":')
_TENSOR_COLS = ["record", "slot", "dtype", "shape", "max", "min", "mean", "norm", "valid", "nan_count",
                "posinf_count", "neginf_count", "requires_grad", "crc32", "xhash", "pool", "numel"]


def _store() -> ModuleType:
    """``engines.store``, imported when a probe-tui dump is first read (it imports h5py)."""
    try:
        import engines.store as store
    except ImportError as exc:  # pragma: no cover - the store ships with the package
        raise DumpSourceError("reading probe-tui dumps needs engines.store ({})".format(exc)) from None
    return store


def _rank_dirs(path: Path) -> Optional[Dict[int, Path]]:
    """{rank: folder} for a run folder, a latest pointer, a dump_path or a rank folder; None if not ours."""
    store = _store()
    if path.is_file() and path.name == "latest" or (path.is_symlink() and path.name == "latest"):
        from engines.runs import resolve_latest

        target = resolve_latest(path.parent)
        return _rank_dirs(target) if target is not None else None
    if not path.is_dir():
        return None
    if DUMP_KIND in store.store_kinds(path):
        m = _RANK_DIR.match(path.name)
        return {int(m.group(1)) if m else 0: path}
    try:
        ranks = {r: p for r, p in store.open_rank_dirs(path).items() if DUMP_KIND in store.store_kinds(p)}
    except store.StoreError:
        ranks = {}
    if ranks:
        return ranks
    if not (path / "run.json").exists():
        from engines.runs import resolve_latest

        target = resolve_latest(path)
        if target is not None and target != path:
            return _rank_dirs(target)
    return None


def find_probe_dump(path: Path) -> Optional["ProbeSource"]:
    try:
        dirs = _rank_dirs(Path(path))
    except OSError as exc:
        raise DumpSourceError("{}: {}".format(path, exc.strerror or exc)) from None
    if not dirs:
        return None
    _check_run_json(next(iter(dirs.values())).parent)
    return ProbeSource(Path(path), dirs)


def _check_run_json(run_dir: Path) -> None:
    """run.json is not read to find the data (the stores are), so a damaged one is said in a warning and the
    dump is read as its stores hold it."""
    path = run_dir / "run.json"
    if not path.is_file():
        return
    problem = ""
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        problem = "unreadable ({})".format(exc)
    else:
        if not isinstance(meta, dict):
            problem = "not a JSON object"
        else:
            steps = meta.get("steps")
            if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
                problem = "'steps' is {!r}, not a count".format(steps)[:120]
    if problem:
        import warnings

        warnings.warn("{}: {}; the dump is read from its stores".format(path, problem), _store().StoreWarning,
                      stacklevel=2)


@dataclass(frozen=True)
class ProbeTensorSpec:
    """Picklable: worker processes reopen the rank's store. ``step``: the piece whose tensors are read (its
    ``tensors`` rows only); None for the whole store."""

    rank_dir: str
    step: Optional[int] = None

    def open(self) -> "ProbeTensorReader":
        return ProbeTensorReader(self.rank_dir, self.step)


class ProbeTensorReader:
    """Element ranges of stored tensors (``tensors`` table rows, by global row number); bfloat16 comes back as
    float32. Only the locating columns of ``step``'s rows are read (all rows when ``step`` is None)."""

    def __init__(self, rank_dir: str, step: Optional[int] = None):
        store = _store()
        self._to_float = store.to_float
        self._pools = store.POOL_DTYPES
        self.path = rank_dir
        with reading(rank_dir):
            self.reader: StoreReader = store.StoreReader(rank_dir, DUMP_KIND)
            cols = self.reader.read("tensors", ["pool", "offset", "numel", "dtype", "shape"],
                                    steps=None if step is None else [int(step)], with_row=True)
        self._rows = cols["row"]
        self._dense = step is None  # rows 0..n-1: a row is its own position
        self.pool, self.offset, self.numel = cols["pool"], cols["offset"], cols["numel"]
        self.dtype, self.shape = cols["dtype"], cols["shape"]

    def _at(self, loc: int) -> int:
        if self._dense:
            return loc
        i = int(np.searchsorted(self._rows, loc))
        if i >= len(self._rows) or int(self._rows[i]) != loc:
            raise DumpSourceError("{}: tensor row {} is not in this step".format(self.path, loc))
        return i

    def info(self, loc: int) -> Tuple[np.dtype, int, tuple]:
        i = self._at(loc)
        pool = str(self.pool[i])
        if not pool:
            raise DumpSourceError("{}: tensor row {} has no stored data".format(self.path, loc))
        numel = int(self.numel[i])
        if pool not in self._pools or numel < 0:
            raise DumpSourceError("{}: tensor row {} is damaged (pool {!r}, numel {})".format(
                self.path, loc, pool[:40], numel))
        dt = np.dtype(np.float32) if "bfloat16" in str(self.dtype[i]) else np.dtype(pool)
        return dt, numel, ()

    def read(self, loc: int, start: int, stop: int) -> np.ndarray:
        i = self._at(loc)
        ref = {"pool": str(self.pool[i]), "offset": int(self.offset[i]) + start, "numel": stop - start,
               "shape": [stop - start]}
        try:
            data = self.reader.read_array(ref)
        except Exception as exc:  # StoreError and h5py's OSError
            raise DumpSourceError("{}: {}".format(self.path, exc)) from None
        return self._to_float(data, str(self.dtype[i]))

    def close(self) -> None:
        self.reader.close()


def _io_of(slot: str, kind: int) -> int:
    if kind == KIND_PARAM_GRAD:
        return IO_PARAM_GRAD
    head = slot.split(".", 1)[0]
    return {"input": IO_INPUT, "output": IO_OUTPUT, "parameters": IO_PARAM}.get(head, IO_OTHER)


def scalar_leaves(args_json: str) -> List[Tuple[str, Any]]:
    """(slot, value) of every non-tensor leaf of a record's ``args`` JSON, in argument order."""
    if not args_json or not _TENSOR_MARK.sub("", args_json).strip("[]{},: \n"):
        return []
    try:
        skel = json.loads(args_json)
    except ValueError:
        return []
    if not isinstance(skel, dict):
        return []
    out: List[Tuple[str, Any]] = []

    def walk(value: Any, slot: str) -> None:
        if isinstance(value, dict) and "tensor" in value and len(value) == 1:
            return
        if isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, "{}.{}".format(slot, i))
            return
        if isinstance(value, dict) and not isinstance(value.get("type"), str):
            for k, v in value.items():
                walk(v, "{}.{}".format(slot, k))
            return
        out.append((slot, value))

    for i, v in enumerate(skel.get("args") or []):
        walk(v, "input.{}".format(i))
    for k, v in (skel.get("kwargs") or {}).items():
        walk(v, "input.{}".format(k))
    return out


class ProbeSource(DumpSource):
    origin = "probe-tui"

    def __init__(self, path: Path, rank_dirs: Dict[int, Path]):
        self.path = path
        self.rank_dirs = rank_dirs
        self._readers: Dict[int, DumpReader] = {}
        self._meta: Optional[Dict[str, Any]] = None

    @guarded
    def _reader(self, rank: int) -> DumpReader:
        r = self._readers.get(rank)
        if r is None:
            r = self._readers[rank] = _store().DumpReader(self.rank_dirs[rank])
        return r

    def ranks(self) -> List[int]:
        return sorted(self.rank_dirs)

    @guarded
    def steps(self, rank: int) -> List[int]:
        return sorted(self._reader(rank).steps())

    def status(self, rank: int) -> str:
        return self._reader(rank).status

    @property
    @guarded
    def framework(self) -> str:
        meta = self._reader(self.ranks()[0]).meta
        fw = str(meta.get("framework") or "")
        return "mindspore" if "mindspore" in fw else ("pytorch" if fw in ("pytorch", "torch") else fw)

    @guarded
    def holds(self) -> Dict[str, bool]:
        r = self._reader(self.ranks()[0])
        steps = r.steps()
        if not steps:
            return {"tensor": False, "statistics": False, "md5": False}
        t = r.tensors(step=steps[0], columns=["valid", "pool"])
        valid = t["valid"]
        return {"tensor": bool(len(valid)) and bool(np.any(t["pool"] != "")),
                "statistics": bool(np.any((valid & 15) != 0)) if len(valid) else False,
                "md5": bool(len(valid)) and bool(np.all((valid & (V_CRC32 | V_XHASH)) != 0))}

    def tensor_spec(self, rank: int, step: int) -> ProbeTensorSpec:
        return ProbeTensorSpec(str(self.rank_dirs[rank]), int(step))

    def describe(self) -> str:
        return "probe-tui dump {} (ranks {})".format(self.path, self.ranks())

    @guarded
    def notes(self) -> List[str]:
        out: List[str] = []
        for rank in self.ranks():
            reader = self._reader(rank)
            status = reader.status
            if status in ("disk_full", "disk_budget", "write_failed"):
                why = {"disk_full": "the disk filled", "disk_budget": "disk_budget was reached",
                       "write_failed": "a write failed"}[status]
                out.append("rank {}: the dump stopped early ({}): later steps were not written".format(rank, why))
            if not reader.steps():
                out.append("rank {}: no complete step".format(rank))
            for step, why in sorted(reader.partial_steps().items()):
                out.append("rank {} step {}: partial, the run {} during it".format(rank, step, why))
        return out

    @guarded
    def tree(self, rank: int, step: int) -> Dict[str, Optional[str]]:
        recs = self._reader(rank).records(step=step, columns=["name", "parent", "kind"])
        mods = recs["kind"] == 1
        return {n: (p or None) for n, p in zip(recs["name"][mods].tolist(), recs["parent"][mods].tolist())}

    @guarded
    def rows(self, rank: int, step: int) -> RowTable:
        reader = self._reader(rank)
        if step not in reader.steps():
            raise DumpSourceError("{}: rank {} has no step {}".format(self.path, rank, step))
        recs = reader.records(step=step, columns=["name", "kind", "direction", "parent", "stack", "args"])
        ts = _tensor_rows(reader, step)
        _check_refs(self.rank_dirs[rank], recs, ts)
        return _build_rows(reader, recs, ts, rank, step)

    @guarded
    def record_args(self, rank: int, step: int) -> Dict[str, str]:
        recs = self._reader(rank).records(step=step, columns=["name", "args"])
        return {n: a for n, a in zip(recs["name"].tolist(), recs["args"].tolist()) if a}

    def release_others(self, rank: int) -> None:
        for other in [r for r in self._readers if r != rank]:
            self._readers.pop(other).close()

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()


def _check_refs(rank_dir: Path, recs: Dict[str, np.ndarray], ts: Dict[str, np.ndarray]) -> None:
    """Every tensor row of a step refers to a record of the same step (``tensors.record``); a row that does not
    (a damaged file) would be joined to the wrong record."""
    refs = ts["record"]
    if refs.size:
        pos = np.searchsorted(recs["row"], refs)
        ok = pos < recs["row"].size
        ok[ok] = recs["row"][pos[ok]] == refs[ok]
        if not ok.all():
            bad = int(refs[~ok][0])
            raise DumpSourceError("{}: tensors.record {} names no record of its step (the dump is damaged)".format(
                rank_dir, bad))


STACK_CACHE = 4096  # stack texts a reader keeps (the writer stores each distinct stack once; steps share them)


def _stack_texts(reader: DumpReader, ids: np.ndarray) -> np.ndarray:
    """Call-stack texts of ``records.stack`` ids; each distinct stack is read once per reader (kept on it), so
    the steps of a long dump, which share their stacks, do not read them again."""
    cache: Dict[int, str] = reader.__dict__.setdefault("_stack_texts", {})
    codes, uniq = factorize(ids)
    wanted = [int(s) for s in uniq.tolist()]
    missing = [s for s in wanted if s >= 0 and s not in cache]
    if missing:
        if len(cache) + len(missing) > STACK_CACHE:
            cache.clear()
        rows = reader.store.read("stacks", ["frames"], rows=missing)["frames"]
        # dumps written before capture dropped them still hold the CLI's, the runner's and runpy's frames
        cache.update((s, "\n".join(user_frames(json.loads(f)))) for s, f in zip(missing, rows.tolist()))
    texts = np.array([cache[s] if s >= 0 else "" for s in wanted] or [""], dtype=object)
    return texts[codes] if len(uniq) else np.full(ids.shape[0], "", dtype=object)


def _build_rows(reader: DumpReader, recs: Dict[str, np.ndarray], ts: Dict[str, np.ndarray], rank: int, step: int) -> RowTable:

    rec_pos = np.searchsorted(recs["row"], ts["record"])
    rec_name = recs["name"][rec_pos]
    kind = recs["kind"][rec_pos]
    slots = ts["slot"]
    slot_codes, slot_uniq = factorize(slots)
    head_io = np.array([_io_of(s, 0) for s in slot_uniq.tolist()] or [IO_OTHER], dtype=np.uint8)
    io = head_io[slot_codes] if len(slot_uniq) else np.zeros(0, np.uint8)
    io = np.where(kind == KIND_PARAM_GRAD, IO_PARAM_GRAD, io).astype(np.uint8)
    n = slots.shape[0]
    dot_slot = np.array(["." + s for s in slot_uniq.tolist()] or [""], dtype=object)
    names = np.empty(n, dtype=object)
    names[:] = list(map(operator.add, rec_name.tolist(), dot_slot[slot_codes].tolist())) if n else []
    valid = ts["valid"].astype(np.uint8)
    crc = np.full(n, "", dtype=object)
    has_crc = (valid & V_CRC32) != 0
    crc[has_crc] = ["{:08x}".format(int(c) & 0xFFFFFFFF) for c in ts["crc32"][has_crc].tolist()]
    only_x = ((valid & V_XHASH) != 0) & ~has_crc
    crc[only_x] = ["x{:016x}".format(int(c) & 0xFFFFFFFFFFFFFFFF) for c in ts["xhash"][only_x].tolist()]
    counts = np.stack([ts["nan_count"], ts["posinf_count"], ts["neginf_count"]])
    nonfinite = np.where((counts >= 0).all(axis=0), counts.clip(min=0).sum(axis=0), -1)
    stacks = _stack_texts(reader, recs["stack"])
    numel = ts["numel"].astype(np.int64)
    cols = dict(
        name=names, record=rec_name, slot=slots, io=io, kind=kind.astype(np.uint8),
        direction=recs["direction"][rec_pos].astype(np.uint8), dtype=ts["dtype"], shape=ts["shape"],
        numel=numel, max=ts["max"], min=ts["min"], mean=ts["mean"], norm=ts["norm"], valid=valid & 15,
        text=np.full(n, None, dtype=object), requires_grad=ts["requires_grad"].astype(np.int8), crc32=crc,
        nonfinite=nonfinite.astype(np.int64), is_tensor=np.ones(n, bool), step=np.full(n, step, np.int64),
        rank=np.full(n, rank, np.int64), order=np.zeros(n, np.int64), parent=recs["parent"][rec_pos],
        stack=stacks[rec_pos], data=np.where(ts["pool"] != "", ts["row"], -1).astype(np.int64),
        data_name=np.full(n, "", dtype=object))
    table = RowTable(args={}, dist=ts["dist"], **cols)
    scalars = _scalar_rows(recs, stacks, rank, step)
    io_rank = np.array([0, 2, 1, 3, 4], dtype=np.int64)  # input, output, parameters, grads, other
    sort_tensor = (rec_pos, io_rank[io], np.arange(n))
    if len(scalars):
        table = RowTable.concat([table, scalars])
        keys = [np.concatenate([a, b]) for a, b in zip(sort_tensor, (scalars.order, np.zeros(len(scalars), np.int64),
                                                                      np.arange(n, n + len(scalars))))]
    else:
        keys = list(sort_tensor)
    order = np.lexsort((keys[2], keys[1], keys[0]))
    if not np.array_equal(order, np.arange(order.shape[0])):  # usually already in order
        table = table.take(order)
    table.order[:] = np.arange(len(table))
    table.args = _args_with_defaults(recs)
    return table


def _tensor_rows(reader: Any, step: int) -> Dict[str, np.ndarray]:
    """The ``tensors`` columns compare reads, ``dist`` (a shard's placement, docs/FORMAT.md) included: all "" for a
    store written before that column existed."""
    try:
        return reader.tensors(step=step, columns=_TENSOR_COLS + ["dist"])
    except (KeyError, ValueError):
        ts = reader.tensors(step=step, columns=_TENSOR_COLS)
        ts["dist"] = np.full(ts["slot"].shape[0], "", dtype=object)
        return ts


def _args_with_defaults(recs: Dict[str, np.ndarray]) -> Dict[str, str]:
    """Records whose ``args`` carry the defaults of the keyword arguments they changed (docs/CAPTURE.md), and the
    graph-mode kernels' scopes (engines/compare/kernel_map.py pairs kernels with APIs by them): compare
    checks a keyword argument the golden record lacks against that default."""
    return {name: a for name, a in zip(recs["name"].tolist(), recs["args"].tolist())
            if a and ('"defaults"' in a or (name.startswith("Kernel.") and '"scope"' in a))}


def _scalar_rows(recs: Dict[str, np.ndarray], stacks: np.ndarray, rank: int, step: int) -> RowTable:
    """Rows for non-tensor arguments; ``order`` temporarily holds the record position (for sorting)."""
    codes, uniq = factorize(recs["args"])
    leaves = [scalar_leaves(a) for a in uniq.tolist()]
    if not any(leaves):
        return RowBuilder().build()
    b = RowBuilder()
    for pos, code in enumerate(codes.tolist()):
        for slot, value in leaves[code]:
            dtype, num, text, crc = scalar_fields(value)
            v = np.nan if num is None else num
            rec = recs["name"][pos]
            b.add(name=rec + "." + slot, record=rec, slot=slot, io=IO_INPUT, kind=int(recs["kind"][pos]),
                  direction=int(recs["direction"][pos]), dtype=dtype, shape="[]", numel=-1, max=v, min=v, mean=v,
                  norm=v, valid=0 if num is None else 15, text=text, requires_grad=-1, crc32=crc, nonfinite=-1,
                  is_tensor=False, step=step, rank=rank, order=pos, parent=recs["parent"][pos], stack=stacks[pos],
                  data=-1, data_name="")
    return b.build()

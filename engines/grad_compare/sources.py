"""The two sides of a grad compare: our grad_probe runs, or msprobe's grad_probe output.

Accepted paths: a dump folder (its ``latest`` run), a run folder (``rank<R>/`` with a grads store), a rank folder,
or msprobe's layout (``rank<R>/grad_summary_{step}.csv`` with ``rank<R>/step{step}/{param}.npy`` bool arrays, or
one such rank folder). Every side gives, per rank and step: parameter names in dump order, element counts,
gradient norms and packed directions.
"""

import csv
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union, cast

import numpy as np

from engines.errors import BadInputError
from engines.safe_fs import PathLike
from engines.store.errors import StoreError

_CSV = re.compile(r"^grad_summary_(\d+)\.csv$")


class SourceError(BadInputError):
    """A path that holds no grad dump, or a damaged one (one line naming it)."""


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _guarded(method: _Method) -> _Method:
    """Anything a damaged file makes a ``load``/``steps``/``level`` raise becomes a :class:`SourceError` naming the
    rank folder, and loaded directions are checked against their element counts."""

    @functools.wraps(method)
    def wrapper(self: Any, rank: int, *args: Any) -> Any:
        from engines.dumps.source import DAMAGE

        where = self.folder(rank)
        try:
            out = method(self, rank, *args)
        except BadInputError:
            raise
        except DAMAGE as exc:
            raise SourceError(f"{where}: damaged or not a grad dump ({type(exc).__name__}: {exc})") from None
        if isinstance(out, StepGrads):
            _check_step(out, where)
        return out

    return cast(_Method, wrapper)


def _check_step(step: "StepGrads", where: Path) -> None:
    if not (len(step.names) == len(step.numels) == len(step.norms) == len(step.packed)):
        raise SourceError(f"{where}: damaged grad dump (columns of different lengths)")
    for name, numel, packed in zip(step.names, step.numels.tolist(), step.packed):
        if numel < 0 or (packed is not None and packed.size != (numel + 7) // 8):
            raise SourceError(f"{where}: damaged grad dump ({name}: {numel} elements, "
                              f"{'no' if packed is None else packed.size} bytes of directions)")


@dataclass
class StepGrads:
    names: List[str]
    numels: np.ndarray
    norms: np.ndarray
    packed: List[Optional[np.ndarray]]


def _rank_dirs(path: Path) -> Dict[int, Path]:
    return {int(p.name[4:]): p for p in path.glob("rank*") if p.is_dir() and p.name[4:].isdigit()}


class OurGrads:
    kind = "probe-tui"

    def __init__(self, rank_dirs: Dict[int, Path]):
        from engines.grad_probe.reader import GradReader

        self._dirs = rank_dirs
        self._readers = {}
        try:
            for rank, p in rank_dirs.items():
                self._readers[rank] = GradReader(p)
        except BaseException:
            self.close()
            raise

    def folder(self, rank: int) -> Path:
        return self._dirs[rank]

    def ranks(self) -> List[int]:
        return sorted(self._readers)

    @_guarded
    def steps(self, rank: int) -> List[int]:
        return sorted(self._readers[rank].steps())

    @_guarded
    def level(self, rank: int) -> str:
        return self._readers[rank].level

    @_guarded
    def load(self, rank: int, step: int) -> StepGrads:
        data = self._readers[rank].read_step(step)
        return StepGrads(data.names, data.numels, data.norm, data.packed)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()


class MsprobeGrads:
    kind = "msprobe"

    def __init__(self, rank_dirs: Dict[int, Path]):
        self._dirs = rank_dirs

    def folder(self, rank: int) -> Path:
        return self._dirs[rank]

    def ranks(self) -> List[int]:
        return sorted(self._dirs)

    @_guarded
    def steps(self, rank: int) -> List[int]:
        return sorted(int(m.group(1)) for p in self._dirs[rank].iterdir() if (m := _CSV.match(p.name)))

    @_guarded
    def level(self, rank: int) -> str:
        steps = self.steps(rank)
        if not steps:
            return "L1"
        with open(self._dirs[rank] / f"grad_summary_{steps[0]}.csv", newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
        return "L0" if "MD5" in header else ("L2" if "=0" in header else "L1")

    @_guarded
    def load(self, rank: int, step: int) -> StepGrads:
        rank_dir = self._dirs[rank]
        names: List[str] = []
        numels: List[int] = []
        norms: List[float] = []
        packed: List[Optional[np.ndarray]] = []
        with open(rank_dir / f"grad_summary_{step}.csv", newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        header = [h.strip().lower() for h in rows[0]] if rows else []
        if "param_name" not in header or "norm" not in header or "shape" not in header:
            raise SourceError(f"{rank_dir / f'grad_summary_{step}.csv'}: not a grad_summary CSV (header {rows[0] if rows else []})")
        name_col, norm_col, shape_col = header.index("param_name"), header.index("norm"), header.index("shape")
        for row in rows[1:]:
            name = row[name_col]
            shape = [int(x) for x in re.findall(r"\d+", row[shape_col])]
            numel = int(np.prod(shape)) if shape else 1
            names.append(name)
            numels.append(numel)
            norms.append(float(row[norm_col]))
            npy = rank_dir / f"step{step}" / f"{name}.npy"
            if npy.exists():
                packed.append(np.packbits(np.load(npy, allow_pickle=False).astype(bool).reshape(-1)))
            else:
                packed.append(None)
        return StepGrads(names, np.array(numels, dtype=np.int64), np.array(norms, dtype=np.float64), packed)

    def close(self) -> None:
        pass


GradSource = Union[OurGrads, MsprobeGrads]


def open_grads(path: PathLike) -> GradSource:
    path = Path(path)
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    if path.is_file() and path.name == "latest":
        return open_grads(path.parent / path.read_text().strip())
    if path.is_file():
        path = path.parent
    if (path / "latest").exists() and not (path / "run.json").exists() and not _rank_dirs(path):
        return open_grads(path / "latest")
    if any(_CSV.match(p.name) for p in path.iterdir()):
        return MsprobeGrads({0: path})
    if (path / "segments.jsonl").exists() or (path / "grads.h5").exists():
        return _our_grads(path, {0: path})
    ranks = _rank_dirs(path)
    ours = {r: p for r, p in ranks.items() if (p / "grads.h5").exists() or (p / "segments.jsonl").exists()}
    if ours:
        return _our_grads(path, ours)
    theirs = {r: p for r, p in ranks.items() if any(_CSV.match(x.name) for x in p.iterdir())}
    if theirs:
        return MsprobeGrads(theirs)
    raise SourceError(f"{path}: no grad_probe output here (no rank folder with a grads store or grad_summary CSVs)")


def _our_grads(path: Path, rank_dirs: Dict[int, Path]) -> OurGrads:
    """Our grads stores; a folder holding another kind of store (a statistics dump) is bad input, said in a line."""
    try:
        return OurGrads(rank_dirs)
    except StoreError as exc:
        raise SourceError(f"{path}: not a grad_probe run ({exc})") from None

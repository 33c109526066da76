"""``DumpReader``: convenience queries over a rank folder's ``dump`` store (no framework needed)."""

import json
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from engines.safe_fs import PathLike

from .closing import Closing
from .dtypes import to_float
from .dump_schema import DUMP_KIND, DUMP_SCHEMA_VERSION
from .gather import unique_inverse
from .reader import StoreReader
from .validate import schema_version

StepSelection = Union[None, int, Sequence[int]]


def _steps_arg(step: StepSelection) -> Optional[List[int]]:
    if step is None:
        return None
    return [int(s) for s in np.atleast_1d(step)]


class DumpReader(Closing):
    def __init__(self, rank_dir: PathLike) -> None:
        self.store = StoreReader(rank_dir, DUMP_KIND)
        try:
            schema_version(self.store.meta, DUMP_SCHEMA_VERSION, f"{self.store.directory}: the dump store")
        except BaseException:
            self.store.close()
            raise

    @property
    def meta(self) -> Dict[str, Any]:
        return self.store.meta

    @property
    def status(self) -> str:
        return self.store.status

    def steps(self) -> List[int]:
        return self.store.steps()

    def records(self, step: StepSelection = None, columns: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        """``records`` columns (all, or those named) of ``step`` (one, several, or all); ``"row"`` holds row
        numbers, which ``tensors()["record"]`` refers to."""
        return self.store.read("records", columns, steps=_steps_arg(step), with_row=True)

    def tensors(self, step: StepSelection = None, columns: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        """``tensors`` columns of ``step``; ``"row"`` holds the row numbers ``tensor_data`` takes."""
        return self.store.read("tensors", columns, steps=_steps_arg(step), with_row=True)

    def partial_steps(self) -> Dict[int, str]:
        """Steps the run ended in the middle of, with how it ended (``stopped``: a signal; ``failed``: the
        script raised): their records stop where the run did (docs/FORMAT.md, "Partial steps")."""
        out: Dict[int, str] = {}
        for commit in self.store.commits():
            info = commit["info"]
            if isinstance(info, dict) and info.get("partial"):
                out[int(commit["step"])] = str(info["partial"])
        return out

    def row_names(self, step: StepSelection = None) -> np.ndarray:
        """``record name + "." + slot`` of every tensor row of ``step`` (msprobe's compare row names), in
        tensor-row order, built once per distinct (name, slot) pair."""
        t = self.store.read("tensors", ["record", "slot"], steps=_steps_arg(step), decode=False)
        if t["record"].size == 0:
            return np.empty(0, dtype=object)
        rec_rows, rec_inverse = unique_inverse(t["record"])
        name_ids = self.store.read("records", ["name"], rows=rec_rows, decode=False)["name"][rec_inverse]
        slot_ids = t["slot"]
        width = int(slot_ids.max()) + 1
        if int(name_ids.max()) < np.iinfo(np.int64).max // width:  # one int64 key per pair: a fast 1-D unique
            keys, inverse = unique_inverse(name_ids * width + slot_ids)
            uniq_names, uniq_slots = keys // width, keys % width
        else:
            pairs, inverse = np.unique(np.stack([name_ids, slot_ids], axis=1), axis=0, return_inverse=True)
            uniq_names, uniq_slots = pairs[:, 0], pairs[:, 1]
        names = self.store.decode(uniq_names)
        slots = self.store.decode(uniq_slots)
        joined = np.array([f"{n}.{s}" for n, s in zip(names.tolist(), slots.tolist())], dtype=object)
        return joined[inverse.reshape(-1)]

    def tensor_data(self, row: int, as_float: bool = False) -> Optional[np.ndarray]:
        """The stored tensor of ``tensors`` row ``row`` (None when only statistics were kept). bfloat16 comes back
        as uint16 bits, or as float32 with ``as_float=True``."""
        t = self.store.read("tensors", ["pool", "offset", "numel", "shape", "dtype"], rows=[int(row)])
        ref = {k: v[0] for k, v in t.items()}
        if not ref["pool"] or int(ref["offset"]) < 0:
            return None
        data = self.store.read_array(ref)
        return to_float(data, ref["dtype"]) if as_float else data

    def stack(self, stack_id: int) -> List[str]:
        """Frames of a call stack (``records["stack"]``); [] for -1."""
        if int(stack_id) < 0:
            return []
        frames = self.store.read("stacks", ["frames"], rows=[int(stack_id)])["frames"][0]
        return list(json.loads(frames))

    def modules(self) -> Dict[str, np.ndarray]:
        return self.store.read("modules")

    def refresh(self) -> bool:
        return self.store.refresh()

    def follow(self, poll_s: float = 0.5, timeout_s: Optional[float] = None) -> Iterator[List[int]]:
        return self.store.follow(poll_s, timeout_s)

    def close(self) -> None:
        self.store.close()

"""Ways to damage a dump, for the bad-input tests (this module holds no tests): byte flips, truncation, HDF5
objects and attributes deleted or replaced, segments.jsonl lines edited, dump.json values retyped."""

import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import h5py
import numpy as np


def flip_bytes(path: Path, positions: List[int], mask: int = 0xFF) -> None:
    """XOR ``mask`` into the bytes at ``positions`` (taken modulo the file size)."""
    data = bytearray(Path(path).read_bytes())
    if not data:
        return
    for p in positions:
        data[p % len(data)] ^= mask
    Path(path).write_bytes(bytes(data))


def truncate(path: Path, fraction: float) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(int(Path(path).stat().st_size * fraction))


def h5_delete(path: Path, key: str) -> None:
    with h5py.File(path, "r+") as f:
        if key in f:
            del f[key]


def h5_replace(path: Path, key: str, data: Any) -> None:
    with h5py.File(path, "r+") as f:
        if key in f:
            del f[key]
        f[key] = data


def h5_attr(path: Path, obj: str, name: str, value: Any) -> None:
    with h5py.File(path, "r+") as f:
        if value is None:
            del f[obj].attrs[name]
        else:
            f[obj].attrs[name] = value


def segment_lines(rank_dir: Path) -> List[Dict[str, Any]]:
    text = (Path(rank_dir) / "segments.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def edit_segments(rank_dir: Path, edit: Callable[[List[Dict[str, Any]]], Any]) -> None:
    """Rewrite ``segments.jsonl`` with ``edit(lines)``; ``edit`` changes the lines in place or returns new text."""
    lines = segment_lines(rank_dir)
    out = edit(lines)
    text = out if isinstance(out, str) else "".join(json.dumps(x) + "\n" for x in lines)
    (Path(rank_dir) / "segments.jsonl").write_text(text)


def set_in_open_line(key: str, value: Any, meta: bool = False) -> Callable[[List[Dict[str, Any]]], None]:
    def edit(lines):
        for ev in lines:
            if ev.get("event") == "open":
                (ev["meta"] if meta else ev)[key] = value
    return edit


def first_tensor_leaf(data: Dict[str, Any]) -> Dict[str, Any]:
    """The first tensor entry of a dump.json ``data`` object (in record order, inputs first)."""
    for entry in data.values():
        for key in ("input_args", "input", "output"):
            for item in entry.get(key) or []:
                if isinstance(item, dict) and "shape" in item:
                    return item
    raise LookupError("no tensor entry")


def edit_dump_json(path: Path, edit: Callable[[Dict[str, Any]], Any]) -> None:
    doc = json.loads(Path(path).read_text())
    edit(doc)
    Path(path).write_text(json.dumps(doc))


def one_line_error(text: str) -> bool:
    """A bad-input message as the CLI prints it: one line, no traceback."""
    return "\n" not in text.strip() and "Traceback" not in text and bool(text.strip())


def assert_one_line(exc_info: Any, *words: str) -> None:
    """The raised error is a one-line bad-input message naming every one of ``words``."""
    text = str(exc_info.value)
    assert one_line_error(text), text
    for word in words:
        assert word in text, text


def run_compare(target: Path, golden: Path, tmp_path: Path, **extra: Any) -> Any:
    """A compare job of ``target`` against ``golden`` (its section extended by ``extra``), run in-process."""
    from engines.events import NullSink
    from engines.runner import run_job
    from schemas import load_config

    section = {"target_path": str(target), "golden_path": str(golden), "output_path": str(tmp_path / "out")}
    section.update(extra)
    return run_job(load_config({"task": "compare", "dump_path": str(tmp_path / "pd"), "compare": section}),
                   events=NullSink())


def np_zeros(n: int, dtype: str = "int64") -> np.ndarray:
    return np.zeros(n, dtype=dtype)

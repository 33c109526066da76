"""A dump written back as msprobe writes it: ``step<N>/rank<R>/{dump,stack,construct}.json`` and, for a tensor run,
``dump_tensor_data/<record>.<slot>.npy`` (docs/EXPORT.md), so msprobe's own compare and visualization
read our runs.

Rows come from any :class:`~engines.dumps.source.DumpSource` (ours, usually). A record's slots become msprobe's
nesting: forward ``input.<i>`` -> ``input_args[i]``, ``input.<kw>`` -> ``input_kwargs[kw]``, ``parameters.<p>``,
``output.<i>``; backward ``input``/``output`` lists; ``parameters_grad`` records ``{param: [T]}``. Backward outputs
of the ops in :mod:`engines.dumps.msprobe.slot_order` are put in msprobe's order (a transposed weight gradient
is written transposed). The export is assembled in a hidden folder beside ``out`` and renamed into place at the
end: an error leaves nothing half-written.
"""

from __future__ import annotations

import ast
import json
import math
import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from engines.dumps.msprobe.slot_order import (
    FLAT_2D,
    ROW,
    SAME,
    TRANSPOSE,
    msprobe_backward_outputs,
    transformed_shape,
)
from engines.dumps.names import parse_record
from engines.dumps.opener import open_dump
from engines.dumps.rows import (
    DIR_BACKWARD,
    KIND_API,
    KIND_PARAM_GRAD,
    KIND_SAVE,
    V_MAX,
    V_MEAN,
    V_MIN,
    V_NORM,
    RowTable,
    parse_shape,
)
from engines.dumps.source import DumpSource, TensorReader
from engines.errors import BadInputError
from engines.safe_fs import PathLike, create_file, make_dirs, make_private_dir

_STATS = (("Max", V_MAX), ("Min", V_MIN), ("Mean", V_MEAN), ("Norm", V_NORM))
_CLASS = "<class '"


class ExportError(BadInputError, ValueError):
    """The run cannot be exported (one line naming the path; exit code 2)."""


class _Tree:
    """Nested slots (``0.1``, ``k.0``) collected into dicts; :meth:`value` turns all-digit dicts into lists."""

    def __init__(self) -> None:
        self.root: Dict[str, Any] = {}

    def put(self, path: List[str], value: Any) -> None:
        node = self.root
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[path[-1]] = value

    @staticmethod
    def value(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if node and all(k.isdigit() for k in node):
            items: List[Any] = [None] * (max(int(k) for k in node) + 1)
            for k, v in node.items():
                items[int(k)] = _Tree.value(v)
            return items
        return {k: _Tree.value(v) for k, v in node.items()}


def scalar_entry(t: RowTable, i: int) -> Any:
    """A non-tensor row as msprobe writes the value: ``{"type": "int", "value": 3}``, null for None."""
    dtype = str(t.dtype[i])
    text = t.text[i]
    if dtype in ("None", "<class 'NoneType'>"):
        return None
    kind = dtype[len(_CLASS):-2] if dtype.startswith(_CLASS) and dtype.endswith("'>") else dtype
    if int(t.valid[i]) & V_MAX and text is None:
        v = float(t.max[i])
        return {"type": kind, "value": int(v) if kind == "int" and math.isfinite(v) and v.is_integer() else v}
    if kind == "bool":
        return {"type": "bool", "value": text == "True"}
    if kind == "str" or text is None:
        return {"type": kind, "value": text}
    if kind == "torch.ProcessGroup":
        return {"type": kind, "group_ranks": _literal(str(text)), "group_id": str(t.crc32[i])}
    return {"type": kind, "value": _literal(str(text))}


def _literal(text: str) -> Any:
    """A value our reader kept as text (``[None, 8, None]`` of a slice, ``[2, 8]`` of a torch.Size) back as JSON;
    text that is no Python literal (``torch.float32``, ``cpu``) stays text."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return text
    return value


class _PieceWriter:
    """One (rank, step) of the export: its dump.json ``data``, stacks and construct, and its tensor files."""

    def __init__(self, t: RowTable, folder: Path, framework: str, reader: Optional[TensorReader],
                 suffix: str = ".npy", msprobe_slots: bool = True) -> None:
        self.t = t
        self.msprobe_slots = msprobe_slots
        self.suffix = suffix
        self.folder = folder
        self.tensor_dir = folder / "dump_tensor_data"
        self.framework = framework
        self.reader = reader
        self.tensors = 0
        self.bytes = 0
        self.skipped: List[str] = []
        self.rows_by_record: Dict[str, List[int]] = {}

    def data(self) -> Dict[str, Any]:
        t = self.t
        codes, names = t.record_codes()
        rows_of: Dict[int, List[int]] = {}
        for i, code in enumerate(codes.tolist()):
            rows_of.setdefault(code, []).append(i)
        out: Dict[str, Any] = {}
        self.rows_by_record = {str(names[code]): rows for code, rows in rows_of.items()}
        for code, name in enumerate(names.tolist()):
            rows = rows_of.get(code, [])
            if not rows:
                continue
            entry = self._record(str(name), rows)
            if entry is not None:
                out[str(name)] = entry
        return out

    def _record(self, name: str, rows: List[int]) -> Optional[Dict[str, Any]]:
        t = self.t
        kind, direction = int(t.kind[rows[0]]), int(t.direction[rows[0]])
        if kind == KIND_SAVE:
            self.skipped.append(name)
            return None
        if kind == KIND_PARAM_GRAD:
            grads: Dict[str, Any] = {}
            for i in rows:
                slot = str(t.slot[i])
                grads[slot] = [self._leaf(i, name + "." + slot, SAME)]
            return grads
        backward = direction == DIR_BACKWARD
        parts: Dict[str, _Tree] = {}
        mapped = backward and kind == KIND_API and self.msprobe_slots
        for i in rows:
            tokens = str(t.slot[i]).split(".")
            head, rest = tokens[0], tokens[1:]
            if head not in ("input", "output", "parameters") or not rest or (mapped and head == "output"):
                continue
            if backward or head != "input":
                part, file_slot = head, [head] + rest
            elif rest[0].isdigit():
                part, file_slot = "input_args", ["input"] + rest
            else:
                part, file_slot = "input_kwargs", ["kwargs"] + rest
            leaf = self._leaf(i, name + "." + ".".join(file_slot), SAME)
            parts.setdefault(part, _Tree()).put(rest, leaf)
        if mapped:
            parts["output"] = self._msprobe_outputs(name, rows)
        if backward:
            return {"input": _list(parts.get("input")), "output": _list(parts.get("output"))}
        entry: Dict[str, Any] = {"input_args": _list(parts.get("input_args")),
                                 "input_kwargs": _Tree.value(parts["input_kwargs"].root) if "input_kwargs" in parts
                                 else {},
                                 "output": _list(parts.get("output"))}
        if "parameters" in parts:
            entry["parameters"] = _Tree.value(parts["parameters"].root)
        return entry

    def _msprobe_outputs(self, name: str, rows: List[int]) -> _Tree:
        """A backward API record's outputs in msprobe's layout (:mod:`engines.dumps.msprobe.slot_order`)."""
        t = self.t
        heads: List[str] = []
        by_source: Dict[str, List[Tuple[int, List[str]]]] = {}
        output_ndim = 0
        for i in rows:
            tokens = str(t.slot[i]).split(".")
            if len(tokens) < 2:
                continue
            source = tokens[0] + "." + tokens[1]
            by_source.setdefault(source, []).append((i, tokens[2:]))
            if tokens[0] == "output" and tokens[1] not in heads:
                heads.append(tokens[1])
            if source == "input.0" and len(tokens) == 2:
                output_ndim = len(parse_shape(str(t.shape[i])) or ())
        forward = self.rows_by_record.get(name[:-len("backward")] + "forward") if name.endswith(".backward") \
            else None
        inputs: Optional[List[Tuple[str, bool]]] = None
        if forward is not None:
            inputs = []
            for i in forward:
                tokens = str(t.slot[i]).split(".")
                if len(tokens) == 2 and tokens[0] == "input" and bool(t.is_tensor[i]):
                    inputs.append((tokens[1], _floating(str(t.dtype[i]))))
        tree = _Tree()
        sources = msprobe_backward_outputs(parse_record(name).base, inputs, heads, output_ndim)
        for place, (slot, transform) in enumerate(sources):
            if slot is None:
                tree.put([str(place)], None)
                continue
            for i, rest in by_source.get(slot, []):
                path = [str(place)] + rest
                tree.put(path, self._leaf(i, name + ".output." + ".".join(path), SAME if rest else transform))
        return tree

    def _leaf(self, i: int, file_stem: str, transform: str) -> Any:
        t = self.t
        if not bool(t.is_tensor[i]):
            return scalar_entry(t, i)
        shape = list(parse_shape(str(t.shape[i])) or ())
        entry: Dict[str, Any] = {"type": "mindspore.Tensor" if self.framework == "mindspore" else "torch.Tensor",
                                 "dtype": str(t.dtype[i]), "shape": transformed_shape(shape, transform)}
        valid = int(t.valid[i])
        for key, bit in _STATS:
            entry[key] = float(getattr(t, key.lower())[i]) if valid & bit else None
        rg = int(t.requires_grad[i])
        if rg >= 0 and self.framework != "mindspore":
            entry["requires_grad"] = bool(rg)
        crc = str(t.crc32[i])
        if len(crc) == 8 and transform in (SAME, FLAT_2D, ROW):  # CRC-32 of the bytes, what msprobe's md5 mode
            entry["md5"] = crc  # writes (a reshape keeps the bytes); our xhash has no msprobe counterpart
        loc = int(t.data[i])
        if self.reader is not None and loc >= 0:
            data_name = file_stem + self.suffix
            self._write_tensor(loc, shape, transform, data_name, str(t.dtype[i]))
            entry["data_name"] = data_name
        return entry

    def _write_tensor(self, loc: int, shape: List[int], transform: str, data_name: str, dtype: str) -> None:
        assert self.reader is not None
        _, numel, _ = self.reader.info(loc)
        arr = self.reader.read(loc, 0, numel)
        if int(np.prod(shape, dtype=np.int64)) == arr.size:
            arr = arr.reshape(shape)
        if transform == TRANSPOSE and arr.ndim == 2:
            arr = np.ascontiguousarray(arr.T)
        elif transform in (FLAT_2D, ROW):
            arr = arr.reshape(transformed_shape(list(arr.shape), transform))
        if not self.tensor_dir.exists():
            make_private_dir(self.tensor_dir)
        with create_file(self.tensor_dir / data_name, "wb") as fh:
            if self.suffix == ".pt":
                from engines.frameworks import adapter_module

                adapter_module("pytorch", "ptload").save_pt(fh, arr, dtype)
            else:
                np.save(fh, arr, allow_pickle=False)
        self.tensors += 1
        self.bytes += int(arr.nbytes)

    def stacks(self) -> Dict[str, Any]:
        t = self.t
        by_text: Dict[str, List[str]] = {}
        for record, stack in zip(t.record.tolist(), t.stack.tolist()):
            if stack:
                names = by_text.setdefault(str(stack), [])
                if not names or names[-1] != record:
                    names.append(str(record))
        return {str(k): [names, text.split("\n")] for k, (text, names) in enumerate(by_text.items())}

    def construct(self, tree: Dict[str, Optional[str]]) -> Dict[str, Optional[str]]:
        out: Dict[str, Optional[str]] = dict(tree)
        for record, parent in zip(self.t.record.tolist(), self.t.parent.tolist()):
            if record not in out:
                out[str(record)] = str(parent) if parent else None
        return out


def _floating(dtype: str) -> bool:
    """Does a tensor of ``dtype`` take part in autograd (``torch.float32``, ``Float16``, complex)?"""
    low = dtype.lower()
    return "float" in low or "complex" in low


def _list(tree: Optional[_Tree]) -> List[Any]:
    if tree is None:
        return []
    value = _Tree.value(tree.root)
    return value if isinstance(value, list) else list(value.values())


def _run_info(source: DumpSource) -> Tuple[str, str]:
    """(task, level) the run was made with; ("statistics", "mix") when the dump does not say."""
    from engines.dumps.probe_source import ProbeSource

    if isinstance(source, ProbeSource) and source.ranks():
        meta = source._reader(source.ranks()[0]).meta.get("run_meta") or {}
        if isinstance(meta, dict):
            return str(meta.get("task") or "statistics"), str(meta.get("level") or "mix")
    return "statistics", "mix"


def _write_json(path: Path, value: Any) -> None:
    with create_file(path, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=1)


TENSOR_FORMATS = ("auto", "pt", "npy")


def tensor_suffix(tensor_format: str, framework: str) -> str:
    """``.pt`` (what msprobe's PyTorch compare reads; needs torch) or ``.npy`` (MindSpore dumps, or no torch).
    ``auto``: ``.pt`` for a PyTorch run when torch is installed, else ``.npy``."""
    if tensor_format not in TENSOR_FORMATS:
        raise ExportError("tensor format {!r}: expected one of {}".format(tensor_format, ", ".join(TENSOR_FORMATS)))
    if tensor_format == "npy" or (tensor_format == "auto" and framework == "mindspore"):
        return ".npy"
    from engines.frameworks import adapter_module

    has_torch = bool(adapter_module("pytorch", "ptload").torch_available())
    if tensor_format == "pt" and not has_torch:
        raise ExportError("tensor format pt: writing .pt files needs torch installed (use npy)")
    return ".pt" if has_torch else ".npy"


def export_msprobe(run: PathLike, out: PathLike, *, tensor_format: str = "auto", msprobe_slots: bool = True,
                   say: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Write the dump at ``run`` under ``out`` (a folder that must not exist, or be empty) in msprobe's layout.
    ``tensor_format``: see :func:`tensor_suffix`; ``msprobe_slots``: backward API outputs in msprobe's layout
    (False: ours, by argument position).

    Returns the summary (``out``, ``pieces``, ``records``, ``tensor_files``, ``tensor_bytes``, ``skipped``).
    Raises :class:`ExportError` (bad input, one line) when ``out`` is taken or the run cannot be read.
    """
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError("{}: already exists and is not an empty folder; choose a new one".format(out))
    source = open_dump(run)
    try:
        task, level = _run_info(source)
        framework = source.framework or "pytorch"
        holds = source.holds()
        suffix = tensor_suffix(tensor_format, framework)
        try:
            make_dirs(out.parent)
        except OSError as exc:
            raise ExportError("{}: cannot create ({})".format(out.parent, exc.strerror or exc)) from None
        tmp = out.with_name(".{}.partial-{}".format(out.name, secrets.token_hex(3)))
        make_private_dir(tmp, exist_ok=False)
        try:
            summary = _export_into(source, tmp, out, task, level, framework,
                                   suffix if holds.get("tensor", False) else "", msprobe_slots, say)
            if out.exists():
                out.rmdir()
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        source.close()
    summary["out"] = str(out)
    return summary


def _export_into(source: DumpSource, tmp: Path, final: Path, task: str, level: str, framework: str,
                 suffix: str, msprobe_slots: bool, say: Optional[Callable[[str], None]]) -> Dict[str, Any]:
    """``suffix``: the tensor files' (``.pt``/``.npy``), "" for a run without tensors."""
    pieces = records = tensors = size = 0
    skipped: List[str] = []
    for rank in source.ranks():
        for step in source.steps(rank):
            t = source.rows(rank, step)
            step_dir = tmp / "step{}".format(step)
            if not step_dir.exists():
                make_private_dir(step_dir)
            folder = make_private_dir(step_dir / "rank{}".format(rank))
            reader = source.tensor_spec(rank, step).open() if suffix else None
            try:
                piece = _PieceWriter(t, folder, framework, reader, suffix or ".npy", msprobe_slots)
                data = piece.data()
            finally:
                if reader is not None:
                    reader.close()
            tensor_dir = final / "step{}".format(step) / "rank{}".format(rank) / "dump_tensor_data"
            _write_json(folder / "dump.json", {
                "task": task if task in ("statistics", "tensor") else "statistics", "level": level,
                "framework": "mindspore" if framework == "mindspore" else "pytorch",
                "dump_data_dir": str(tensor_dir.resolve()) if piece.tensors else None, "data": data})
            _write_json(folder / "stack.json", piece.stacks())
            _write_json(folder / "construct.json", piece.construct(source.tree(rank, step)))
            pieces += 1
            records += len(data)
            tensors += piece.tensors
            size += piece.bytes
            skipped.extend(piece.skipped)
            if say is not None:
                say("rank {} step {}: {} records, {} tensor files".format(rank, step, len(data), piece.tensors))
        source.release_others(rank)
    if not pieces:
        raise ExportError("{}: holds no committed step to export".format(source.path))
    return {"pieces": pieces, "records": records, "tensor_files": tensors, "tensor_bytes": size,
            "tensor_format": suffix.lstrip(".") or None,
            "skipped": sorted(set(skipped))}

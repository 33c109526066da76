"""Compare keys: how a row's name is normalised before matching (docs/reference/msprobe-analysis.md §1.6, docs/decisions/0014-training-setups.md).

Applied in this order to each side:

1. wrapper prefixes stripped (DDP's leading ``module.``, FSDP ``_fsdp_wrapped_module``, activation-checkpoint
   ``_checkpoint_wrapped_module``, torch.compile ``_orig_mod``);
2. MindSpore target against a PyTorch golden (or ``cell_mapping``/``api_mapping`` asked for): ``Cell`` ->
   ``Module`` with an optional cell map, API names through :mod:`engines.compare.ms_pt_names` plus a user map
   that may renumber arguments;
3. backward renumbering (msprobe 26.2): a backward record's call index becomes its order of appearance among
   backward records of the same name, which undoes recompute drift in msprobe dumps;
4. ``data_mapping`` (target row name -> golden row name) last; it disables the dtype gate;
5. ``layer_mapping`` replaces names by scope keys: module path (mapped) + direction + ordinal of the API call
   inside that module + slot, so that differently named APIs of mapped layers pair by position.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.compare import ms_pt_names
from engines.dumps.names import parse_record, with_index
from engines.dumps.rows import DIR_BACKWARD, DIR_NONE, KIND_API, KIND_MODULE, KIND_PARAM_GRAD, RowTable
from engines.errors import BadInputError

WRAPPER_TOKENS = {"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"}
ABANDONED = "abandoned"
_STATES = (("input", "args"), ("output", "outputs"), ("parameters", "parameters"),
           ("parameters_grad", "parameters_grad"))


class MappingError(BadInputError, ValueError):
    """A mapping file is missing or malformed (one line naming the file)."""


# Mapping files that ship with probe-tui (the demo's MindSpore-to-PyTorch pairs, ...) are named relative to the
# folder holding the installed packages, so a sample config finds them from any working directory.
INSTALL_ROOT = Path(__file__).resolve().parents[2]


def resolve_mapping_path(path) -> Path:
    """``path`` as given when it exists, else the file of that relative name shipped with probe-tui."""
    path = Path(path)
    if not path.exists() and not path.is_absolute():
        shipped = INSTALL_ROOT / path
        if shipped.is_file():
            return shipped
    return path


def load_mapping_file(path, what: str) -> Any:
    """A YAML or JSON mapping file."""
    path = resolve_mapping_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MappingError("{} {}: cannot read ({})".format(what, path, exc.strerror or exc)) from None
    except UnicodeDecodeError as exc:
        raise MappingError("{} {}: not UTF-8 text (byte {} at position {})".format(
            what, path, exc.object[exc.start:exc.start + 1].hex(), exc.start)) from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise MappingError("{} {}: not valid JSON ({})".format(what, path, exc)) from None
        except RecursionError:
            raise MappingError("{} {}: JSON nested too deeply".format(what, path)) from None
    try:
        import yaml
    except ImportError:
        raise MappingError("{} {}: reading YAML needs PyYAML (pip install pyyaml), or give a .json file"
                           .format(what, path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MappingError("{} {}: not valid YAML ({})".format(what, path, str(exc).splitlines()[0])) from None
    except RecursionError:
        raise MappingError("{} {}: YAML nested too deeply".format(what, path)) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a value YAML cannot build (a date like 2020-13-45)
        raise MappingError("{} {}: not valid YAML ({})".format(what, path, exc)) from None


def string_map(raw: Any, what: str, source, shape: str) -> Dict[str, str]:
    """A ``{name: name}`` mapping: an object whose values are names (strings or numbers), nothing nested."""
    if not isinstance(raw, dict) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                            for v in raw.values()):
        raise MappingError("{} {}: expected {}".format(what, source, shape))
    return {str(k): str(v) for k, v in raw.items()}


@dataclass
class KeyOptions:
    """How to build compare keys; see the module docstring."""

    data_mapping: Optional[Dict[str, str]] = None
    api_mapping: Optional[List[dict]] = None  # user entries; the built-in table applies whenever mapping is on
    map_mindspore: bool = False  # apply Cell->Module and API mapping to the target
    cell_mapping: Optional[Dict[str, str]] = None
    layer_mapping: Optional[Dict[str, Dict[str, str]]] = None
    renumber_backward: bool = False
    msprobe_side: str = ""  # "target"/"golden": that side is msprobe's and the other ours (engines.compare.dunders)


def strip_wrappers(record: str, ddp: bool) -> str:
    tokens = record.split(".")
    kept = [t for t in tokens if t not in WRAPPER_TOKENS]
    if ddp and len(kept) > 2 and kept[0] in ("Module", "Cell") and kept[1] == "module":
        del kept[1]
    return ".".join(kept)


def _all_ddp(records: List[str]) -> bool:
    modules = [r for r in records if r.startswith(("Module.", "Cell."))]
    return bool(modules) and all(r.split(".")[1] == "module" for r in modules)


def cell_to_module(record: str, cell_map: Optional[Dict[str, str]]) -> str:
    rec = parse_record(record)
    if rec.kind not in (KIND_MODULE, KIND_PARAM_GRAD) or not record.startswith("Cell."):
        return record
    body = record[len("Cell."):]
    if cell_map:
        m = re.match(r"^(.*?)(\.(?:forward|backward|parameters_grad)(?:\..*)?)$", body)
        if m:
            head, tail = m.group(1), m.group(2)
            if head in cell_map:
                body = cell_map[head] + tail
            else:
                for src, dst in cell_map.items():
                    head = head.replace(src, dst)
                body = head + tail
    return "Module." + body


def renumber_backward(records: List[str]) -> Dict[str, str]:
    """msprobe 26.2's renumbering: backward call index = order of appearance among backward records of that name."""
    counters: Dict[str, int] = {}
    out: Dict[str, str] = {}
    for record in records:
        rec = parse_record(record)
        if rec.direction != DIR_BACKWARD or rec.kind not in (KIND_API, KIND_MODULE) or rec.index is None:
            continue
        n = counters.get(rec.base, 0)
        counters[rec.base] = n + 1
        out[record] = with_index(record, n)
    return out


class _ApiEntry:
    def __init__(self, raw: dict):
        self.ms_api = raw["ms_api"]
        self.pt_api = raw["pt_api"]
        self.index_maps: Dict[str, Dict[str, str]] = {}
        for state, key in _STATES:
            ms, pt = raw.get("ms_" + key), raw.get("pt_" + key)
            if ms is None and pt is None:
                continue
            ms, pt = list(ms or []), list(pt or [])
            if len(ms) != len(pt):
                raise MappingError("api_mapping entry {}: ms_{} and pt_{} differ in length".format(
                    self.ms_api, key, key))
            self.index_maps[state] = {str(a): str(b) for a, b in zip(ms, pt)}


def parse_api_mapping(raw: Any, source: str, what: str = "api_mapping") -> List[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(e, dict) and isinstance(e.get("ms_api"), str)
                                            and isinstance(e.get("pt_api"), str) for e in raw):
        raise MappingError("{} {}: expected a list of {{ms_api, pt_api, ...}} entries".format(what, source))
    for entry in raw:
        for _, key in _STATES:
            for side in ("ms_", "pt_"):
                value = entry.get(side + key)
                if value is not None and not (isinstance(value, list) and all(
                        isinstance(v, (str, int)) and not isinstance(v, bool) for v in value)):
                    raise MappingError("{} {}: entry {}: {}{} must be a list of argument indices".format(
                        what, source, entry["ms_api"], side, key))
    return raw


def _map_api_slot(slot: str, entry: Optional[_ApiEntry], backward: bool = False) -> str:
    if entry is None:
        return slot
    state, _, rest = slot.partition(".")
    # A backward record's input.k is the gradient of forward output k, its output.k that of argument k.
    index_map = entry.index_maps.get({"input": "output", "output": "input"}.get(state, state) if backward
                                     else state)
    if index_map is None:
        return slot
    head, _, tail = rest.partition(".")
    if head not in index_map:
        return slot + ABANDONED
    return state + "." + index_map[head] + ("." + tail if tail else "")


def _needs_rewrite(records: List[str], opts: KeyOptions, is_target: bool) -> bool:
    """Whether any key differs from the row name (checked on the joined text: fast for a million records)."""
    if opts.renumber_backward or opts.layer_mapping is not None or (is_target and (opts.map_mindspore
                                                                                   or opts.data_mapping)):
        return True
    text = "\n" + "\n".join(records)
    if any(tok in text for tok in WRAPPER_TOKENS):
        return True
    for prefix in ("Module", "Cell"):
        if "\n{}.module.".format(prefix) in text:
            return True
    return False


def side_keys(rows: RowTable, opts: KeyOptions, *, is_target: bool) -> np.ndarray:
    """The compare key of every row of one side."""
    records = rows.record_order()
    if not _needs_rewrite(records, opts, is_target):
        return rows.name
    ddp = _all_ddp(records)
    rec_map: Dict[str, str] = {r: strip_wrappers(r, ddp) for r in records}
    entries: Dict[str, _ApiEntry] = {}
    if is_target and opts.map_mindspore:
        entries = {e["ms_api"]: _ApiEntry(e) for e in (opts.api_mapping or [])}
        user_names = {k: e.pt_api for k, e in entries.items()}
        for r, new in rec_map.items():
            new = cell_to_module(new, opts.cell_mapping)
            rec = parse_record(new)
            if rec.kind == KIND_API and rec.direction != DIR_NONE:
                api = ".".join(new.split(".")[:2])
                mapped = ms_pt_names.map_api(api, user_names)
                new = mapped + new[len(api):]
            rec_map[r] = new
    if opts.renumber_backward:
        renum = renumber_backward([rec_map[r] for r in records])
        rec_map = {r: renum.get(v, v) for r, v in rec_map.items()}
    if opts.layer_mapping is not None:
        return _layer_keys(rows, rec_map, opts.layer_mapping if is_target else {})
    keys = np.empty(len(rows), dtype=object)
    api_of = {r: ".".join(r.split(".")[:2]) for r in records} if entries else {}
    for i, (record, slot) in enumerate(zip(rows.record, rows.slot)):
        new = rec_map[record]
        if entries:
            slot = _map_api_slot(slot, entries.get(api_of[record]), record.endswith(".backward"))
        keys[i] = new + "." + slot
    if is_target and opts.data_mapping:
        dm = opts.data_mapping
        keys = np.array([dm.get(k, dm.get(n, k)) for k, n in zip(keys, rows.name)], dtype=object)
    return keys


def _module_path(record: str) -> Tuple[str, str]:
    """(module path, class) of a module record name."""
    rec = parse_record(record)
    tokens = rec.base.split(".")
    return ".".join(tokens[1:-1]), tokens[-1] if len(tokens) > 1 else ""


def _map_scope(path: str, classes: Dict[str, str], layer_map: Dict[str, Dict[str, str]]) -> str:
    """Rewrite a module path with ``{ParentClass: {child.path: target.path}}``, longest keys first."""
    if not layer_map or not path:
        return path
    tokens = path.split(".")
    out: List[str] = []
    pos = 0
    while pos < len(tokens):
        parent_path = ".".join(tokens[:pos])
        parent_cls = classes.get(parent_path, "TopLayer" if pos == 0 else "")
        table = layer_map.get(parent_cls) or (layer_map.get("Cell") if pos == 0 else None) or {}
        hit = None
        for key in sorted(table, key=lambda k: -k.count(".")):
            width = key.count(".") + 1
            if ".".join(tokens[pos:pos + width]) == key:
                hit = (key, width)
                break
        if hit:
            out.append(str(table[hit[0]]))
            pos += hit[1]
        else:
            out.append(tokens[pos])
            pos += 1
    return ".".join(out)


def _layer_keys(rows: RowTable, rec_map: Dict[str, str], layer_map: Dict[str, Dict[str, str]]) -> np.ndarray:
    classes: Dict[str, str] = {}
    for r in rec_map.values():
        if parse_record(r).kind == KIND_MODULE:
            path, cls = _module_path(r)
            classes[path] = cls
    rec_key: Dict[str, str] = {}
    ordinal: Dict[Tuple[str, int], int] = {}
    parent_of = dict(zip(rows.record, rows.parent))
    for r in rows.record_order():
        new = rec_map[r]
        rec = parse_record(new)
        if rec.kind in (KIND_MODULE, KIND_PARAM_GRAD):
            path = _map_scope(_module_path(new)[0], classes, layer_map)
            word = "parameters_grad" if rec.kind == KIND_PARAM_GRAD else ("forward", "backward")[rec.direction]
            rec_key[r] = "{}|{}|{}".format(path, word, rec.index)
        else:
            parent = rec_map.get(parent_of.get(r) or "", "")
            scope = _map_scope(_module_path(parent)[0], classes, layer_map) if parent else ""
            n = ordinal.get((scope, rec.direction), 0)
            ordinal[(scope, rec.direction)] = n + 1
            rec_key[r] = "{}|{}|#{}".format(scope, rec.direction, n)
    return np.array([rec_key[r] + "|" + s for r, s in zip(rows.record, rows.slot)], dtype=object)

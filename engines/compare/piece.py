"""Compare one (rank, step) piece: match rows, compute metrics for the mode, judge every row.

The result is a dict of equal-length numpy columns (see :mod:`engines.compare.columns`), one row per target row
in target dump order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from engines.compare import classic, stats_metrics, tensor_metrics, verdicts
from engines.compare.arg_defaults import flag_changed_defaults
from engines.compare.dtypes import neutral_dtypes
from engines.compare.mapping import KeyOptions
from engines.compare.matching import Match, match_rows
from engines.compare.stats_metrics import STATS
from engines.compare.tensor_metrics import (
    ST_DTYPE_GATE,
    ST_NO_DATA,
    ST_NOT_TENSOR,
    ST_OK,
    ST_SHAPE,
    ST_UNMATCHED,
)
from engines.compare.tensor_stream import PairTask, compare_pairs, itemsize_of
from engines.compare.verdicts import IGNORED_APIS, F, Thresholds
from engines.dumps.rows import STAT_BITS, V_MAX, V_MIN, RowTable
from engines.dumps.source import TensorSpec

MODES = ("tensor", "statistics", "md5")


@dataclass
class PieceSettings:
    mode: str = "statistics"
    keys: KeyOptions = field(default_factory=KeyOptions)
    fuzzy: bool = False
    cross_framework: bool = False
    rel_eps: Optional[float] = None
    small_value: float = 0.0
    thresholds: Thresholds = field(default_factory=Thresholds.default)
    highlight: str = "none"
    workers: Optional[int] = None
    progress: Optional[Callable[[int, int], None]] = None


def _golden(values: np.ndarray, gi: np.ndarray, fill: object) -> np.ndarray:
    out = np.empty(gi.shape[0], dtype=values.dtype)
    hit = gi >= 0
    out[hit] = values[gi[hit]]
    out[~hit] = fill
    return out


def _stats(rows: RowTable) -> Dict[str, np.ndarray]:
    return {s: getattr(rows, s) for s in STATS}


def _known_on_both(t_stats: Dict[str, np.ndarray], g_stats: Dict[str, np.ndarray], t_valid: np.ndarray,
                   g_valid: np.ndarray) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """The statistics with those a side does not know (its valid bit clear: a bool mean, a merged shard's norm)
    set to NaN on both sides: a missing statistic is not compared (never a difference)."""
    t_out, g_out = dict(t_stats), dict(g_stats)
    for s in STATS:
        bit = STAT_BITS[s]
        unknown = ((t_valid & bit) == 0) | ((g_valid & bit) == 0)
        if unknown.any():
            t_out[s] = np.where(unknown, math.nan, t_stats[s])
            g_out[s] = np.where(unknown, math.nan, g_stats[s])
    return t_out, g_out


def _api_name(record: str) -> str:
    parts = record.split(".", 2)
    return parts[1] if len(parts) > 2 else ""


def compare_piece(t: RowTable, g: RowTable, t_spec: Optional[TensorSpec], g_spec: Optional[TensorSpec],
                  st: PieceSettings) -> Tuple[Dict[str, np.ndarray], Match]:
    """Columns of the result rows and the :class:`~engines.compare.matching.Match` behind them."""
    match = match_rows(t, g, st.keys, fuzzy=st.fuzzy, cross_framework=st.cross_framework)
    gi = match.golden_index
    matched = gi >= 0
    n = len(t)
    cols: Dict[str, np.ndarray] = {
        "rank": t.rank, "step": t.step, "order": t.order, "target_name": t.name,
        "golden_name": _golden(g.name, gi, ""), "record": t.record, "slot": t.slot, "io": t.io, "kind": t.kind,
        "direction": t.direction, "parent": t.parent, "stack": t.stack,
        "target_dtype": t.dtype, "golden_dtype": _golden(g.dtype, gi, ""),
        "target_shape": t.shape, "golden_shape": _golden(g.shape, gi, ""), "numel": t.numel,
        "target_requires_grad": t.requires_grad, "golden_requires_grad": _golden(g.requires_grad, gi, -1),
        "target_crc32": t.crc32, "golden_crc32": _golden(g.crc32, gi, ""),
        "t_valid": t.valid, "g_valid": _golden(g.valid, gi, 0), "matched": matched,
        "fuzzy": match.fuzzy,
    }
    g_stats: Dict[str, np.ndarray] = {}
    for s in STATS:
        cols["t_" + s] = getattr(t, s)
        g_stats[s] = _golden(getattr(g, s), gi, math.nan)
        cols["g_" + s] = g_stats[s]
    g_text = _golden(g.text, gi, None)
    cols["t_text"] = t.text
    cols["g_text"] = g_text
    if st.mode == "tensor":
        cols["data_name"] = _data_names(t.data_name, _golden(g.data_name, gi, ""))
    else:
        cols["data_name"] = np.empty(n, dtype=object)
        cols["data_name"].fill("-1")  # one shared object (np.full would make one per row)

    flags = np.zeros(n, dtype=np.uint32)
    status = np.full(n, ST_OK, dtype=np.uint8)
    flags[~matched] |= F["no golden row"]
    status[~matched] = ST_UNMATCHED
    flags[match.gated] |= F["dtype class differs"]
    status[match.gated] = ST_DTYPE_GATE
    flags[match.fuzzy] |= F["fuzzy match"]
    tensor = t.is_tensor & matched
    shape_diff = tensor & (t.shape != cols["golden_shape"])
    layout_notes = _folded_layouts(t, g, gi, shape_diff, match)
    shape_diff &= layout_notes == ""
    flags[shape_diff] |= F["shape differs"]
    status[shape_diff] = ST_SHAPE
    t_dtype, g_dtype = neutral_dtypes(t.dtype), neutral_dtypes(cols["golden_dtype"])  # Float32 == torch.float32
    flags[matched & (t_dtype != g_dtype) & ~match.gated] |= F["dtype differs"]
    rg_t, rg_g = t.requires_grad, cols["golden_requires_grad"]
    cols["requires_grad_equal"] = np.where((rg_t < 0) | (rg_g < 0), -1, (rg_t == rg_g).astype(np.int8))
    flags[matched & (rg_t >= 0) & (rg_g >= 0) & (rg_t != rg_g)] |= F["requires_grad differs"]
    record_code, records = t.record_codes()
    cols["record_code"] = record_code
    ignored_record = np.fromiter((_api_name(r) in IGNORED_APIS for r in records.tolist()), bool, len(records))
    if ignored_record.any():
        flags[ignored_record[record_code]] |= F["ignored api"]
    _nonfinite_flags(cols, flags, matched)

    unknown = {s: matched & (((t.valid & STAT_BITS[s]) == 0) | ((cols["g_valid"] & STAT_BITS[s]) == 0))
               & t.is_tensor for s in STATS}
    stat_cols = stats_metrics.stats_table(_stats(t), g_stats, {s: t.text for s in STATS},
                                          {s: g_text for s in STATS}, matched, small_value=st.small_value,
                                          unknown=unknown)
    cols.update(stat_cols)
    scalar = ~t.is_tensor & matched
    status[scalar] = ST_NOT_TENSOR
    _scalar_flags(cols, flags, scalar, t.text, g_text)
    flag_changed_defaults(cols, flags, t, matched, F["scalar argument changed"])

    t_known, g_known = _known_on_both(_stats(t), g_stats, t.valid, cols["g_valid"])
    rel_err = stats_metrics.scaled_stat_errors(t_known, g_known, t.numel, st.small_value, scale_norm=g_stats["norm"])
    rel_err[~tensor] = np.nan
    both_hash = (t.crc32 != "") & (cols["golden_crc32"] != "") & matched
    hash_equal = np.full(n, -1, dtype=np.int8)
    hash_equal[both_hash] = (t.crc32[both_hash] == cols["golden_crc32"][both_hash]).astype(np.int8)
    cols["hash_equal"] = hash_equal
    # identical bits settle a row whatever the statistics say
    rel_err[hash_equal == 1] = 0.0
    for name in ("cosine", "euc_dist", "max_abs_err", "max_rel_err", "one_thousandth", "five_thousandths"):
        cols[name] = np.full(n, math.nan)
    cols["cosine_unsupported"] = np.zeros(n, dtype=bool)
    cols["ratios_unsupported"] = np.zeros(n, dtype=bool)
    messages = np.full(n, "", dtype=object)

    if st.mode == "md5":
        flags[(hash_equal == 0) & ~scalar] |= F["hash differs"]
        rel_err[:] = np.nan
    elif st.mode == "tensor":
        _tensor_metrics(t, g, gi, tensor & ~shape_diff, t_spec, g_spec, st, cols, flags, status, rel_err,
                        messages)
    cols["rel_err"] = rel_err
    cols["status"] = status
    cols["flags"] = flags
    verdict, flags, reasons = verdicts.judge(cols, st.thresholds, st.mode)
    cols["verdict"] = verdict
    cols["flags"] = flags
    for extra in (layout_notes, messages):
        for i in np.flatnonzero(extra != ""):
            reasons[i] = (reasons[i] + "; " if reasons[i] else "") + extra[i]
    cols["reasons"] = reasons
    if st.highlight == "classic":
        _classic(cols, st.mode == "tensor")
    return cols, match


def _folded_layouts(t: RowTable, g: RowTable, gi: np.ndarray, shape_diff: np.ndarray, match: Match) -> np.ndarray:
    """A note for each row whose shapes differ but which is one tensor in two layouts: a graph-mode kernel paired
    with an API record holding as many elements (MindSpore folds ``[2, 8, 96]`` into ``[16, 96]`` for its
    kernels). Such a row is compared as values (statistics; tensors flattened), not as a shape error. API records
    against API records keep the shape rule. "" elsewhere."""
    notes = np.full(shape_diff.shape[0], "", dtype=object)
    if match.kernel_paired is None:
        return notes
    rows = np.flatnonzero(shape_diff & match.kernel_paired)
    for i in rows[(t.numel[rows] >= 0) & (t.numel[rows] == g.numel[gi[rows]])].tolist():
        notes[i] = "layouts differ ({} against {}: a graph-mode kernel's), compared as values".format(
            t.shape[i], g.shape[gi[i]])
    return notes


def _data_names(t_names: np.ndarray, g_names: np.ndarray) -> np.ndarray:
    """msprobe's Data_name cell: ``"['<target file>', '<golden file>']"``, ``-1`` for none."""
    out = np.empty(t_names.shape[0], dtype=object)
    out[:] = ["['{}', '{}']".format(a or "-1", b or "-1") if (a or b) else "-1"
              for a, b in zip(t_names.tolist(), g_names.tolist())]
    return out


def _nonfinite_flags(cols: Dict[str, np.ndarray], flags: np.ndarray, matched: np.ndarray) -> None:
    """From the statistics: a non-finite max/min on one side only (the tensor compare refines it)."""
    def nonfinite(prefix: str) -> np.ndarray:
        valid = cols[prefix + "_valid"]
        bad = np.zeros(valid.shape[0], dtype=bool)
        for s, bit in (("max", V_MAX), ("min", V_MIN)):
            bad |= ((valid & bit) != 0) & ~np.isfinite(cols[prefix + "_" + s])
        return bad

    t_bad, g_bad = nonfinite("t"), nonfinite("g")
    g_known = (cols["g_valid"] & (V_MAX | V_MIN)) != 0
    flags[matched & t_bad & ~g_bad & g_known] |= F["target non-finite"]
    flags[matched & g_bad & ~t_bad] |= F["golden non-finite"]
    both = matched & t_bad & g_bad
    if both.any():
        differ = np.zeros(both.shape[0], dtype=bool)
        for s in ("max", "min"):
            a, b = cols["t_" + s], cols["g_" + s]
            with np.errstate(invalid="ignore"):  # only the non-finite values must agree
                differ |= (~np.isfinite(a) | ~np.isfinite(b)) & ~((a == b) | (np.isnan(a) & np.isnan(b)))
        flags[both & differ] |= F["non-finite positions differ"]


def _scalar_flags(cols: Dict[str, np.ndarray], flags: np.ndarray, scalar: np.ndarray, t_text: np.ndarray,
                  g_text: np.ndarray) -> None:
    for i in np.flatnonzero(scalar):
        a, b = t_text[i], g_text[i]
        if a is not None or b is not None:
            if a == b or (stats_metrics.is_device_text(a) and stats_metrics.is_device_text(b)):
                continue
            flags[i] |= F["scalar argument changed"]
        else:
            x, y = cols["t_max"][i], cols["g_max"][i]
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                flags[i] |= F["scalar argument changed"]


def _tensor_metrics(t: RowTable, g: RowTable, gi: np.ndarray, comparable: np.ndarray, t_spec: Optional[TensorSpec],
                    g_spec: Optional[TensorSpec], st: PieceSettings, cols: Dict[str, np.ndarray], flags: np.ndarray,
                    status: np.ndarray, rel_err: np.ndarray, messages: np.ndarray) -> None:
    has_data = comparable & (t.data >= 0)
    has_data[has_data] &= g.data[gi[has_data]] >= 0
    no_data = comparable & ~has_data
    status[no_data] = ST_NO_DATA
    no_stats = no_data & ~np.isfinite(rel_err)
    flags[no_stats] |= F["no tensor data"]
    for i in np.flatnonzero(no_data):
        messages[i] = "NPU does not have data file." if t.data[i] < 0 else "Bench does not have data file."
    tasks = [PairTask(int(i), int(t.data[i]), int(g.data[gi[i]]), max(int(t.numel[i]), 0),
                      itemsize_of(str(t.dtype[i]))) for i in np.flatnonzero(has_data)]
    if not tasks:
        return
    outcomes = compare_pairs(tasks, t_spec, g_spec, rel_eps=st.rel_eps, small_value=st.small_value,
                             workers=st.workers, progress=st.progress)
    for row, out in outcomes.items():
        partial = out.partial
        if out.error or partial is None:  # an outcome holds an error or the sums, never neither
            status[row] = tensor_metrics.ST_READ_ERROR
            flags[row] |= F["no tensor data"]
            messages[row] = "Dump file not found or read failed: " + out.error
            rel_err[row] = np.nan
            continue
        shape = tuple(json_shape(cols["target_shape"][row]))
        m = tensor_metrics.finish(partial, shape, dtype_differs=out.x_dtype != out.y_dtype)
        status[row] = m.status
        for name, value in zip(("cosine", "euc_dist", "max_abs_err", "max_rel_err", "one_thousandth",
                                "five_thousandths"), m.as_tuple()):
            cols[name][row] = value
        cols["cosine_unsupported"][row] = m.cosine_unsupported
        cols["ratios_unsupported"][row] = m.ratios_unsupported
        rel_err[row] = m.rel_err
        if m.status == tensor_metrics.ST_NONFINITE:
            flags[row] |= F["non-finite positions differ"]
            rel_err[row] = np.inf
        elif m.status == tensor_metrics.ST_EMPTY:
            flags[row] &= ~np.uint32(F["target non-finite"] | F["golden non-finite"])
        else:
            # the data settles it: matched non-finite values were compared as equal
            flags[row] &= ~np.uint32(F["target non-finite"] | F["golden non-finite"]
                                     | F["non-finite positions differ"])
        if m.zero_side:
            flags[row] |= F["one side all zeros"]
        texts = [x for x in m.messages if x != tensor_metrics.MSG_DTYPE]
        if texts:
            messages[row] = " ".join(texts)


def json_shape(text: str) -> Sequence[Any]:
    """The dims of a shape text (a JSON list); () when it is not one."""
    import json

    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return ()
    return value if isinstance(value, list) else ()


def _classic(cols: Dict[str, np.ndarray], tensor_mode: bool) -> None:
    max_rel = np.fmax.reduce([np.abs(cols[s + "_rel"]) for s in STATS])
    cols["max_rel"] = max_rel
    colour, msgs = classic.highlight(cols, tensor_mode)
    cols["classic_colour"] = colour
    cols["classic_messages"] = msgs
    if tensor_mode:
        acc = np.empty(colour.shape[0], dtype=object)
        for i in range(colour.shape[0]):
            acc[i] = classic.classic_accuracy_cell(cols, i)
        cols["classic_accuracy"] = acc
    else:
        n_stats = {s: cols["t_" + s] for s in STATS}
        g_stats = {s: cols["g_" + s] for s in STATS}
        cols["classic_warning"] = classic.classic_stats_warning(n_stats, g_stats) & cols["matched"]

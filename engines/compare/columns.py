"""The result table's columns: HDF5 names and types (docs/FORMAT.md, "Compare results"), and the msprobe report
headers per mode (docs/reference/msprobe-analysis.md §1.12, wheel 26.2 layout)."""

from __future__ import annotations

from typing import Tuple

# (column, type) as stored in the HDF5 result table; "str" = interned string-table ids, "json" = not interned
RESULT_COLUMNS = (
    ("rank", "int64"), ("step", "int64"), ("order", "int64"),
    ("target_name", "str"), ("golden_name", "str"), ("record", "str"), ("slot", "str"),
    ("io", "uint8"), ("kind", "uint8"), ("direction", "uint8"), ("parent", "str"),
    ("target_dtype", "str"), ("golden_dtype", "str"), ("target_shape", "str"), ("golden_shape", "str"),
    ("numel", "int64"), ("target_requires_grad", "int8"), ("golden_requires_grad", "int8"),
    ("t_max", "float64"), ("t_min", "float64"), ("t_mean", "float64"), ("t_norm", "float64"),
    ("g_max", "float64"), ("g_min", "float64"), ("g_mean", "float64"), ("g_norm", "float64"),
    ("t_valid", "uint8"), ("g_valid", "uint8"), ("t_text", "json"), ("g_text", "json"),
    ("max_diff", "float64"), ("min_diff", "float64"), ("mean_diff", "float64"), ("norm_diff", "float64"),
    ("max_rel", "float64"), ("min_rel", "float64"), ("mean_rel", "float64"), ("norm_rel", "float64"),
    ("max_note", "uint8"), ("min_note", "uint8"), ("mean_note", "uint8"), ("norm_note", "uint8"),
    ("cosine", "float64"), ("euc_dist", "float64"), ("max_abs_err", "float64"), ("max_rel_err", "float64"),
    ("one_thousandth", "float64"), ("five_thousandths", "float64"), ("rel_err", "float64"),
    ("target_crc32", "str"), ("golden_crc32", "str"), ("hash_equal", "int8"),
    ("status", "uint8"), ("verdict", "uint8"), ("flags", "uint32"), ("reasons", "json"),
    ("fuzzy", "uint8"), ("stack", "str"), ("data_name", "str"),
)
CLASSIC_COLUMNS = (("classic_colour", "uint8"), ("classic_messages", "json"))

DIVERGENCE_COLUMNS = (
    ("rank", "int64"), ("step", "int64"), ("position", "int64"), ("record", "str"), ("kind", "uint8"),
    ("direction", "uint8"), ("phase", "uint8"), ("tier", "uint8"), ("score", "float64"), ("out_err", "float64"),
    ("in_err", "float64"), ("floor", "float64"), ("worst_verdict", "uint8"), ("first_row", "int64"),
    ("order", "int64"), ("parent", "str"), ("changed_args", "json"), ("note", "json"),
    ("last_op", "str"), ("n_ops", "int64"), ("link", "str"), ("members", "json"),
)
TREE_COLUMNS = (
    ("rank", "int64"), ("step", "int64"), ("node", "str"), ("parent", "str"), ("kind", "uint8"),
    ("depth", "int64"), ("n_rows", "int64"), ("n_pass", "int64"), ("n_warning", "int64"), ("n_error", "int64"),
    ("n_unmatched", "int64"), ("worst_verdict", "uint8"), ("max_rel_err", "float64"),
    ("min_cosine", "float64"), ("max_score", "float64"), ("first_row", "int64"),
)
GOLDEN_ONLY_COLUMNS = (("rank", "int64"), ("step", "int64"), ("golden_name", "str"), ("golden_dtype", "str"),
                       ("golden_shape", "str"))

PREFIX_HEADERS = ("NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
                  "NPU Requires_grad", "Bench Requires_grad")
TENSOR_HEADERS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio")
STATS_HEADERS = ("Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                 "MeanRelativeErr", "NormRelativeErr")
VALUE_HEADERS = ("NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean",
                 "Bench l2norm")
MD5_HEADERS = ("NPU MD5", "BENCH MD5")
TAIL_HEADERS = ("Requires_grad Consistent", "Result", "Err_message")
# ours, after msprobe's columns
EXTRA_HEADERS = ("RelErr", "Rank", "Step")


def report_headers(mode: str, *, stack: bool, classic: bool) -> Tuple[str, ...]:
    """Report header for a mode (wheel layout; classic adds "Accuracy Reached or Not" in tensor mode)."""
    body: Tuple[str, ...]
    if mode == "tensor":
        body = TENSOR_HEADERS + VALUE_HEADERS
    elif mode == "statistics":
        body = STATS_HEADERS + VALUE_HEADERS
    else:
        body = MD5_HEADERS
    tail: Tuple[str, ...] = TAIL_HEADERS
    if classic and mode == "tensor":
        tail = ("Requires_grad Consistent", "Accuracy Reached or Not", "Result", "Err_message")
    head: Tuple[str, ...] = PREFIX_HEADERS + body + tail
    if stack:
        head += ("NPU_Stack_Info",)
    if mode == "tensor":
        head += ("Data_name",)
    return head + EXTRA_HEADERS

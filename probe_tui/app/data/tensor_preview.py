"""Tensor values for the dump browser: a slice of a stored tensor and a histogram, read in chunks.

Uses the dump source's tensor readers (``info(loc)``, ``read(loc, start, stop)``: the same ones compare and parse
stream with); slices use ``engines.parse.inspect.parse_index`` (``"0, :4"``, no eval).
"""

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from engines.dumps.rows import RowTable
from engines.parse.inspect import Histogram, json_shape, parse_index, tensor_histogram

MAX_SLICE_ELEMENTS = 1 << 26  # a slice needs the whole tensor in memory: 64M elements at most
PREVIEW_VALUES = 48


class PreviewError(ValueError):
    """A slice that cannot be taken (one line)."""


@dataclass
class Preview:
    shape: Tuple[int, ...]
    index: str
    values: np.ndarray
    histogram: Optional[Histogram]


def _locate(rows: RowTable, i: int) -> int:
    loc = int(rows.data[i])
    if loc < 0:
        raise PreviewError("{}: statistics only, no tensor data in this dump".format(rows.name[i]))
    return loc


def read_slice(reader, rows: RowTable, i: int, index: str = "") -> Tuple[Tuple[int, ...], np.ndarray]:
    """``(shape, values)``: the first values when ``index`` is empty, else ``tensor[index]``."""
    loc = _locate(rows, i)
    _, numel, _ = reader.info(loc)
    shape = json_shape(rows.shape[i]) or (numel,)
    if int(np.prod(shape)) != numel:
        shape = (numel,)
    if not index.strip():
        return shape, reader.read(loc, 0, min(numel, PREVIEW_VALUES))
    if numel > MAX_SLICE_ELEMENTS:
        raise PreviewError("{:,} elements: too large to slice here (probe-tui parse --export-npy)".format(numel))
    try:
        key = parse_index(index)
    except Exception as exc:
        raise PreviewError(str(exc)) from None
    whole = reader.read(loc, 0, numel).reshape(shape)
    try:
        return shape, np.asarray(whole[key])
    except IndexError as exc:
        raise PreviewError("index {!r} on shape {}: {}".format(index, list(shape), exc)) from None


def histogram(reader, rows: RowTable, i: int, bins: int = 24, log: bool = False) -> Histogram:
    """Counts of the finite values in ``bins`` equal bins (``engines.parse.inspect.tensor_histogram``); ``log``
    bins ``log10(|x|)`` of the non-zero values (magnitudes: where underflow and overflow show)."""
    return tensor_histogram(reader, _locate(rows, i), bins=bins, log=log)

"""CSV report columns as bytes, built a block of rows at a time with numpy.

Each column is a :class:`Field`; ``field.block(lo, hi)`` gives its cells for rows ``lo:hi`` as a width and a
function that writes them into a ``[rows, width]`` uint8 view, NUL bytes where a cell is shorter. The writer
puts the blocks side by side with the separators and drops every NUL (``bytes.translate``), which gives the
CSV text: no Python object per cell. Text columns are dictionary-coded (each distinct text quoted and encoded
once, then gathered by code); numbers go through :mod:`engines.compare.float_text` (Python's ``repr`` digits).

A NUL inside a text would vanish that way, so texts write it as the two characters ``\\0``.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines.compare.columns import report_headers
from engines.compare.float_text import FloatText
from engines.compare.report_cells import Cells, NumCells, cell_builders
from engines.compare.verdicts import UNMATCHED, VERDICTS
from engines.dumps.rows import factorize

_SPECIAL = (",", '"', "\n", "\r")
Block = Tuple[int, Callable[[np.ndarray], None]]


def csv_text(text: Optional[str], safe: bool = False) -> str:
    """A cell as the CSV holds it: quoted when it has a separator, quote or newline; ``safe``: text that Excel
    would run as a formula gets a leading quote."""
    t = "" if text is None else str(text)
    if safe and t[:1] in ("=", "+", "@") and len(t) > 1:
        t = "'" + t
    if any(c in t for c in _SPECIAL):
        t = '"' + t.replace('"', '""') + '"'
    return t.replace("\0", "\\0")


def _table(texts: Sequence[str]) -> np.ndarray:
    """[k, w] uint8: the UTF-8 bytes of each text, NUL padded."""
    encoded = [t.encode("utf-8") for t in texts]
    width = max((len(b) for b in encoded), default=0)
    if width == 0:
        return np.zeros((len(encoded), 0), dtype=np.uint8)
    return np.array(encoded, dtype="S{}".format(width)).view(np.uint8).reshape(len(encoded), width)


class Field:
    def block(self, lo: int, hi: int) -> Block:
        raise NotImplementedError


class Coded(Field):
    """Cells ``table[codes]``: a text column coded against its distinct texts."""

    def __init__(self, codes: np.ndarray, texts: Sequence[str]):
        self.codes = codes
        self.table = _table(texts)

    def block(self, lo: int, hi: int) -> Block:
        width = self.table.shape[1]
        codes = self.codes[lo:hi]

        def fill(view: np.ndarray) -> None:
            view[...] = self.table[codes]

        return width, fill


class Joined(Field):
    """Several fields written into one cell (``record`` + ``.`` + ``slot``)."""

    def __init__(self, parts: Sequence[Field]):
        self.parts = list(parts)

    def block(self, lo: int, hi: int) -> Block:
        blocks = [p.block(lo, hi) for p in self.parts]

        def fill(view: np.ndarray) -> None:
            pos = 0
            for w, f in blocks:
                f(view[:, pos:pos + w])
                pos += w

        return sum(w for w, _ in blocks), fill


class Constant(Field):
    def __init__(self, text: str):
        self.row = _table([text])[0]

    def block(self, lo: int, hi: int) -> Block:
        def fill(view: np.ndarray) -> None:
            view[...] = self.row

        return self.row.shape[0], fill


class Overridden(Field):
    """``base`` except at ``rows`` (sorted row numbers), which show ``other`` (coded over those rows only)."""

    def __init__(self, base: Field, rows: np.ndarray, other: Coded):
        self.base, self.rows, self.other = base, rows, other

    def block(self, lo: int, hi: int) -> Block:
        w_base, base_fill = self.base.block(lo, hi)
        a, b = np.searchsorted(self.rows, [lo, hi])
        if a == b:
            return w_base, base_fill
        local = self.rows[a:b] - lo
        table = self.other.table
        codes = self.other.codes[a:b]
        width = max(w_base, table.shape[1])

        def fill(view: np.ndarray) -> None:
            base_fill(view[:, :w_base])
            view[local] = 0
            view[local, :table.shape[1]] = table[codes]

        return width, fill


class Numbers(Field):
    """A :class:`NumCells` column: numbers as Python's ``repr`` writes them (integers as ``str``), tokens where
    the cells have them."""

    def __init__(self, cells: NumCells):
        self.cells = cells
        self.tokens = _table([csv_text(t) for t in cells.table])

    def block(self, lo: int, hi: int) -> Block:
        values = self.cells.values[lo:hi]
        codes = self.cells.codes[lo:hi]
        tok_rows = np.flatnonzero(codes)
        if self.cells.integers:
            inverse, uniq = np.unique(values.astype(np.int64), return_inverse=True)[::-1]
            return Coded(inverse.reshape(-1), [str(v) for v in uniq.tolist()]).block(0, values.shape[0])
        text = None
        if tok_rows.size < values.shape[0]:
            text = FloatText(values if not tok_rows.size else np.where(codes == 0, values, 0.0))
        width = max(text.width if text is not None else 0, self.tokens.shape[1] if tok_rows.size else 0)

        def fill(view: np.ndarray) -> None:
            tmp = np.zeros(view.shape, dtype=np.uint8)  # small and contiguous: see FloatText
            if text is not None:
                text.write(tmp)
            if tok_rows.size:
                tmp[tok_rows] = 0
                tmp[tok_rows, :self.tokens.shape[1]] = self.tokens[codes[tok_rows]]
            view[...] = tmp

        return width, fill


def _coded(values: np.ndarray, safe: bool = False) -> Tuple[np.ndarray, List[str]]:
    codes, uniques = factorize(np.asarray(values, dtype=object))
    return codes, [csv_text(u, safe) for u in uniques.tolist()]


def coded_text(values: np.ndarray, safe: bool = False) -> Coded:
    """A text column (object array of str/None) coded against its distinct values."""
    return Coded(*_coded(values, safe))


def coded_ints(values: np.ndarray, texts: Sequence[str], offset: int = 0) -> Coded:
    """Small integer codes (``values + offset`` indexes ``texts``)."""
    return Coded(values.astype(np.int64) + offset, [csv_text(t) for t in texts])


def _with_na(values: np.ndarray, matched: np.ndarray) -> np.ndarray:
    out = np.asarray(values, dtype=object).copy()
    out[~matched] = "N/A"
    return out


def _record_codes(cols: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """(record number of each row, record names): compare_piece's numbering when the table has it."""
    codes = cols.get("record_code")
    if codes is None or not len(codes):
        return factorize(cols["record"])
    seen = np.maximum.accumulate(codes)  # codes are numbered in first-seen order: a new one exceeds all before
    first = np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]])
    return codes, cols["record"][first]


def _names(cols: Dict[str, np.ndarray]) -> Field:
    """``record.slot``, coded by part (a million distinct names, far fewer parts) unless a part needs quoting."""
    rec_codes, recs = _record_codes(cols)
    slot_codes, slots = factorize(cols["slot"])
    parts = [str(x) for x in recs.tolist() + slots.tolist()]
    joined = "".join(parts)
    if any(c in joined for c in _SPECIAL + ("\0",)):
        return coded_text(cols["target_name"], safe=True)
    rec_texts = ["'" + r if r[:1] in ("=", "+", "@") else r for r in map(str, recs.tolist())]
    return Joined([Coded(rec_codes, rec_texts), Constant("."), Coded(slot_codes, [str(s) for s in slots.tolist()])])


def _golden_names(cols: Dict[str, np.ndarray], npu: Field) -> Field:
    matched = cols["matched"]
    same = matched & (cols["golden_name"] == cols["target_name"])
    rows = np.flatnonzero(~same)
    if not rows.size:
        return npu
    other = _with_na(cols["golden_name"][rows], matched[rows])
    return Overridden(npu, rows, coded_text(other, safe=True))


def _first_of_record(cols: Dict[str, np.ndarray]) -> Field:
    """The stack on the first row of each record, empty on the others."""
    rec_codes, _ = _record_codes(cols)
    first = np.ones(rec_codes.shape[0], dtype=bool)
    first[1:] = rec_codes[1:] != rec_codes[:-1]
    codes, texts = _coded(cols["stack"], safe=True)
    if not first.all():
        if "" not in texts:
            texts.append("")
        codes = np.where(first, codes, texts.index(""))
    return Coded(codes, texts)


def _err_message(cols: Dict[str, np.ndarray], builders: Dict[str, Callable[[], Cells]]) -> Field:
    if "classic_messages" in cols:
        return coded_text(np.array(builders["Err_message"](), dtype=object))
    reasons = np.asarray(cols["reasons"], dtype=object).copy()
    reasons[(cols["verdict"] == UNMATCHED) & (reasons == "")] = "No bench data matched."
    return coded_text(reasons, safe=True)


def csv_fields(cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> List[Field]:
    """The fields of the report's columns, in header order (headers: :func:`report_headers`)."""
    builders = cell_builders(cols, classic)
    matched = cols["matched"]
    rg = ("N/A", "False", "True")
    npu = _names(cols)
    special = {
        "NPU Name": lambda: npu,
        "Bench Name": lambda: _golden_names(cols, npu),
        "NPU Dtype": lambda: coded_text(cols["target_dtype"]),
        "Bench Dtype": lambda: coded_text(_with_na(cols["golden_dtype"], matched)),
        "NPU Tensor Shape": lambda: coded_text(cols["target_shape"]),
        "Bench Tensor Shape": lambda: coded_text(_with_na(cols["golden_shape"], matched)),
        "NPU Requires_grad": lambda: coded_ints(np.clip(cols["target_requires_grad"], -1, 1), rg, 1),
        "Bench Requires_grad": lambda: coded_ints(np.where(matched, np.clip(cols["golden_requires_grad"], -1, 1),
                                                           -1), rg, 1),
        "Requires_grad Consistent": lambda: coded_ints(np.clip(cols["requires_grad_equal"], -1, 1), rg, 1),
        "Result": lambda: coded_ints(cols["verdict"], VERDICTS),
        "Err_message": lambda: _err_message(cols, builders),
        "NPU_Stack_Info": lambda: _first_of_record(cols),
    }
    fields: List[Field] = []
    for head in report_headers(mode, stack=stack, classic=classic):
        if head in special:
            fields.append(special[head]())
            continue
        key = head + "@tensor" if (head == "MaxRelativeErr" and mode == "tensor") else head
        cells = builders[key]()
        if isinstance(cells, NumCells):
            fields.append(Numbers(cells))
        else:
            fields.append(coded_text(np.array(cells, dtype=object)))
    return fields


def rows_bytes(fields: Sequence[Field], lo: int, hi: int) -> bytes:
    """Rows ``lo:hi`` of the report as CSV bytes (each row ends with a newline)."""
    if hi <= lo:
        return b""
    blocks = [f.block(lo, hi) for f in fields]
    total = sum(w for w, _ in blocks) + len(blocks)
    buf = np.zeros((hi - lo, total), dtype=np.uint8)
    pos = 0
    for i, (w, fill) in enumerate(blocks):
        if w:
            fill(buf[:, pos:pos + w])
        pos += w
        buf[:, pos] = ord(",") if i < len(blocks) - 1 else ord("\n")
        pos += 1
    return buf.tobytes().translate(None, b"\0")

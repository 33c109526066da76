"""What the compare browser's tables show: the results rows and the first-divergence rows, cell by cell.

Both are :class:`~probe_tui.app.widgets.virtual_table.RowSource` s over numpy columns: only the rows on screen are
ever formatted.
"""

from typing import Dict, List, Sequence

import numpy as np
from rich.text import Text

from engines.compare.divergence import PHASES, SUSPECT_KINDS
from engines.compare.suspects import suspect_record
from engines.compare.verdicts import VERDICTS
from probe_tui.app.data.compare_result import VERDICT_STYLES, CompareResult, ResultView
from probe_tui.app.styles import themed
from probe_tui.app.widgets.virtual_table import Column, RowSource
from probe_tui.formatting import number_text

ROW_STYLES = {2: "error", 1: "warning", 3: "muted", 4: "dim"}
METRIC_LABELS = {"rel_err": "rel_err", "cosine": "cosine", "max_abs_err": "max_abs", "max_rel_err": "max_rel_e",
                 "max_rel": "max_rel", "norm_rel": "norm_rel", "target_crc32": "target crc",
                 "golden_crc32": "golden crc"}
MODE_METRICS = {"tensor": ("rel_err", "cosine", "max_abs_err"), "statistics": ("rel_err", "max_rel"),
                "md5": ("target_crc32", "golden_crc32")}


def number_width(n_rows: int) -> int:
    """Width of the row-number column: the digits of the last row, and room for the sort arrow."""
    return max(3, len(str(max(0, n_rows - 1)))) + 2


def verdict_text(code: int) -> Text:
    return Text(VERDICTS[int(code)], style=themed(VERDICT_STYLES.get(int(code), "")))


def mode_metrics(data: CompareResult) -> List[str]:
    """The metric columns the results table shows for the result's mode (those the result has)."""
    return [m for m in MODE_METRICS.get(data.mode, MODE_METRICS["statistics"]) if m in data.columns or m in data.text]


class ResultRows(RowSource):
    """The rows of a :class:`ResultView`: where, name, verdict, the mode's metrics, dtype, shape, reasons."""

    def __init__(self, data: CompareResult, view: ResultView, name_width: int = 40) -> None:
        self.data = data
        self.view = view
        self.metrics = mode_metrics(data)
        self.name_width = name_width

    def __len__(self) -> int:
        return len(self.view)

    def columns(self) -> List[Column]:
        sort_column = {"order": "#", "severity": "verdict", "name": "name"}.get(self.view.sort, self.view.sort)
        arrow = " ▲" if self.view.descending else " ▼"
        if self.view.sort in ("order", "name"):
            arrow = " ▼" if self.view.descending else " ▲"

        def label(key: str, text: str) -> str:
            return text + arrow if key == sort_column else text

        cols = [Column("#", label("#", "#"), number_width(len(self.data.columns["verdict"])), "right")]
        if self.data.multi_piece:
            cols.append(Column("where", "where", 7))
        cols += [Column("name", label("name", "name"), self.name_width, overflow="start"),
                 Column("verdict", label("verdict", "verdict"), 9)]
        for m in self.metrics:
            width = 9 if m not in ("target_crc32", "golden_crc32") else 11
            cols.append(Column(m, label(m, METRIC_LABELS.get(m, m)), width, "right"))
        cols += [Column("dtype", "dtype", 9), Column("shape", "shape", 14), Column("reasons", "reasons", 48)]
        return cols

    def result_row(self, position: int) -> int:
        return int(self.view.rows[position])

    def cells(self, position: int) -> Sequence[object]:
        d = self.data
        i = int(self.view.rows[position])
        out: List[object] = [str(i)]
        if d.multi_piece:
            out.append("r{} s{}".format(int(d.columns["rank"][i]), int(d.columns["step"][i])))
        out.append(d.name(i))
        out.append(verdict_text(d.columns["verdict"][i]))
        for m in self.metrics:
            out.append(d.text[m][i] if m in d.text else number_text(d.columns[m][i]))
        dtype = d.text["target_dtype"][i]
        out += [dtype.replace("torch.", ""), d.text["target_shape"][i], d.text["reasons"][i]]
        return out

    def row_style(self, position: int) -> str:
        return ROW_STYLES.get(int(self.data.columns["verdict"][int(self.view.rows[position])]), "")


DIVERGENCE_COLUMNS = [Column("pos", "#", 4, "right"), Column("where", "where", 7),
                      Column("record", "record", 34, overflow="middle"), Column("score", "score", 9, "right"),
                      Column("kind", "kind", 15), Column("phase", "phase", 8), Column("out", "out err", 9, "right"),
                      Column("in", "in err", 9, "right"), Column("verdict", "verdict", 9), Column("note", "note", 70)]


class DivergenceRows(RowSource):
    """The first-divergence ranking, best suspect first."""

    def __init__(self, table: Dict[str, np.ndarray]) -> None:
        self.table = table

    def __len__(self) -> int:
        return int(self.table["record"].shape[0])

    def cells(self, row: int) -> Sequence[object]:
        t = self.table
        kind = int(t["kind"][row])
        note = str(t["note"][row] or "")
        changed = str(t["changed_args"][row] or "")
        if changed:
            note = (changed + "; " + note) if note else changed
        return [str(int(t["position"][row])), "r{} s{}".format(int(t["rank"][row]), int(t["step"][row])),
                suspect_record(t, row), number_text(t["score"][row]),
                SUSPECT_KINDS[kind] if kind < len(SUSPECT_KINDS) else str(kind),
                PHASES[int(t["phase"][row])] if int(t["phase"][row]) < len(PHASES) else "",
                number_text(t["out_err"][row]), number_text(t["in_err"][row]),
                verdict_text(t["worst_verdict"][row]), note]

    def row_style(self, row: int) -> str:
        return "bold" if row == 0 else ""


def no_match_text(view: ResultView) -> str:
    """What an empty view says: no row passes its filter and search, and how to widen it."""
    parts = ["filter " + view.verdict_filter] if view.verdict_filter != "all" else []
    if view.search:
        parts.append("search " + repr(view.search))
    if view.rank is not None:
        parts.append("rank {}".format(view.rank))
    how = "f changes the filter, / the search" if parts else "f changes the filter"
    return "No row matches ({}): {}.".format(", ".join(parts) or "this view", how)

"""The xlsx report: msprobe's columns with whole-row colouring.

Colours follow our verdicts (error red ``FFFF0000``, warning yellow ``FFFFFF00``, msprobe's fills) unless
``highlight: classic`` asks for msprobe's own red/yellow rules. Excel holds 1,048,576 rows: a larger result is
refused with :class:`XlsxRefused` (the HDF5 and CSV outputs hold any size).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np

from engines import safe_fs
from engines.compare.classic import RED, YELLOW
from engines.compare.report_cells import report_rows
from engines.compare.verdicts import ERROR, WARNING

EXCEL_MAX_ROWS = 1_048_576
RED_FILL = "FFFF0000"
YELLOW_FILL = "FFFFFF00"


class XlsxRefused(ValueError):
    """More rows than one Excel sheet holds, or openpyxl missing."""


def write_xlsx(path: Path, cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> Path:
    rows = int(cols["verdict"].shape[0])
    if rows + 1 > EXCEL_MAX_ROWS:
        raise XlsxRefused("xlsx report refused: {} rows exceed Excel's limit of {} a sheet; use the HDF5 or CSV "
                           "output".format(rows, EXCEL_MAX_ROWS - 1))
    book = XlsxAppender(path, mode, stack=stack, classic=classic)
    book.add(cols)
    return book.finish()


class XlsxAppender:
    """The xlsx report filled a chunk of result rows at a time (openpyxl's write-only sheet); :meth:`add` raises
    :class:`XlsxRefused` once the rows pass Excel's limit (the workbook is then dropped)."""

    def __init__(self, path: Path, mode: str, *, stack: bool, classic: bool) -> None:
        try:
            from openpyxl import Workbook
            from openpyxl.cell import WriteOnlyCell
            from openpyxl.styles import PatternFill
        except ImportError:
            raise XlsxRefused("xlsx report needs openpyxl (pip install openpyxl)") from None
        self.path, self.mode, self.stack, self.classic = Path(path), mode, stack, classic
        self._cell = WriteOnlyCell
        self.fills = {1: PatternFill("solid", start_color=YELLOW_FILL, end_color=YELLOW_FILL),
                      2: PatternFill("solid", start_color=RED_FILL, end_color=RED_FILL)}
        self.book = Workbook(write_only=True)
        self.sheet = self.book.create_sheet("compare_result")
        self.rows = 0
        self._header = True

    def add(self, cols: Dict[str, np.ndarray]) -> None:
        self.rows += int(cols["verdict"].shape[0])
        if self.rows + 1 > EXCEL_MAX_ROWS:
            self.book = self.sheet = None
            raise XlsxRefused("xlsx report refused: {}+ rows exceed Excel's limit of {} a sheet; use the HDF5 or "
                              "CSV output".format(self.rows, EXCEL_MAX_ROWS - 1))
        classic, ws, fills = self.classic, self.sheet, self.fills
        if classic and "classic_colour" in cols:
            colour = np.where(cols["classic_colour"] == RED, 2, np.where(cols["classic_colour"] == YELLOW, 1, 0))
        else:
            colour = np.where(cols["verdict"] == ERROR, 2, np.where(cols["verdict"] == WARNING, 1, 0))
        it = report_rows(cols, self.mode, stack=self.stack, classic=classic)
        header = next(it)
        if self._header:
            ws.append(header)
            self._header = False
        for i, row in enumerate(it):
            c = int(colour[i])
            if not c:
                ws.append(row)
                continue
            cells = []
            for value in row:
                cell = self._cell(ws, value=value)
                cell.fill = fills[c]
                cells.append(cell)
            ws.append(cells)

    def finish(self) -> Path:
        tmp = self.path.with_name(self.path.name + ".partial")
        with safe_fs.atomic_file(self.path, "wb", tmp=tmp) as fh:
            self.book.save(fh)
        return self.path

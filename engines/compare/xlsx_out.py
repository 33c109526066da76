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
    try:
        from openpyxl import Workbook
        from openpyxl.cell import WriteOnlyCell
        from openpyxl.styles import PatternFill
    except ImportError:
        raise XlsxRefused("xlsx report needs openpyxl (pip install openpyxl)") from None
    if classic and "classic_colour" in cols:
        colour = np.where(cols["classic_colour"] == RED, 2, np.where(cols["classic_colour"] == YELLOW, 1, 0))
    else:
        colour = np.where(cols["verdict"] == ERROR, 2, np.where(cols["verdict"] == WARNING, 1, 0))
    fills = {1: PatternFill("solid", start_color=YELLOW_FILL, end_color=YELLOW_FILL),
             2: PatternFill("solid", start_color=RED_FILL, end_color=RED_FILL)}
    wb = Workbook(write_only=True)
    ws = wb.create_sheet("compare_result")
    it = report_rows(cols, mode, stack=stack, classic=classic)
    ws.append(next(it))
    for i, row in enumerate(it):
        c = int(colour[i])
        if not c:
            ws.append(row)
            continue
        cells = []
        for value in row:
            cell = WriteOnlyCell(ws, value=value)
            cell.fill = fills[c]
            cells.append(cell)
        ws.append(cells)
    path = Path(path)
    with safe_fs.atomic_file(path, "wb", tmp=path.with_name(path.name + ".partial")) as fh:
        wb.save(fh)
    return path

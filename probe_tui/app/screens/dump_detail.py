"""The dump browser's detail pane: the dump, a piece, a record with its rows, one tensor with its statistics,
values and histogram. Plain functions to rich renderables."""

from typing import List, Optional

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from engines.dumps.rows import IO_NAMES, STAT_BITS
from probe_tui.app.data.dump_index import DumpIndex, Piece
from probe_tui.app.data.tensor_preview import Preview
from probe_tui.app.styles import themed
from probe_tui.app.widgets.dump_tree import dtype_text, record_kind_text
from probe_tui.app.widgets.histogram import histogram_text
from probe_tui.formatting import number_text

ROWS_SHOWN = 40
STACK_LINES = 6


def _stat(piece: Piece, i: int, stat: str) -> str:
    rows = piece.rows
    return number_text(getattr(rows, stat)[i]) if rows.valid[i] & STAT_BITS[stat] else "—"


def dump_detail(index: DumpIndex) -> RenderableType:
    holds = ", ".join(k for k, v in index.holds.items() if v) or "nothing readable"
    lines = [Text(str(index.path), style="bold"),
             Text("{} dump · {}".format(index.origin, index.framework or "framework unknown"), style="dim"),
             Text("holds: " + holds),
             Text("ranks {} · steps {}".format(_list(index.ranks), _list(index.steps())))]
    if not index.holds.get("tensor"):
        lines.append(Text("No tensor data (statistics only): values and histograms need a tensor dump.",
                          style="italic dim"))
    return Group(*lines)


def _list(values: List[int]) -> str:
    if len(values) > 8:
        return "{}…{} ({})".format(values[0], values[-1], len(values))
    return ", ".join(str(v) for v in values) or "none"


def piece_detail(piece: Piece) -> RenderableType:
    bad = int(piece.nonfinite.sum())
    lines = [Text("rank {} · step {}".format(piece.rank, piece.step), style="bold"),
             Text("{:,} records · {:,} rows · {:,} with tensor data".format(
                 len(piece.records), len(piece.rows), int((piece.rows.data >= 0).sum())))]
    if bad:
        first = next(n for n in piece.records if piece.records[n].nonfinite)
        lines.append(Text("{:,} rows hold inf/nan; first in {}".format(bad, first), style=themed("bold error")))
    return Group(*lines)


def record_detail(piece: Piece, name: str) -> RenderableType:
    node = piece.records[name]
    parts: List[RenderableType] = [Text(name, style="bold"), Text(record_kind_text(piece, name), style="dim")]
    if node.parent:
        parts.append(Text("in " + node.parent, style="dim"))
    if node.nonfinite:
        parts.append(Text("holds inf/nan", style=themed("bold error")))
    if node.rows.size:
        table = Table(box=None, padding=(0, 1), header_style="bold")
        for col, justify in (("slot", "left"), ("dtype", "left"), ("shape", "left"), ("max", "right"),
                             ("min", "right"), ("mean", "right"), ("norm", "right")):
            table.add_column(col, justify=justify, no_wrap=True)
        rows = piece.rows
        for i in node.rows[:ROWS_SHOWN].tolist():
            style = themed("error") if piece.nonfinite[i] else ""
            value = rows.text[i]
            if value is not None:
                cells = [value, "", "", ""]
            else:
                cells = [_stat(piece, i, s) for s in ("max", "min", "mean", "norm")]
            table.add_row(str(rows.slot[i]), dtype_text(rows.dtype[i]),
                          str(rows.shape[i]) if rows.is_tensor[i] else "", *cells, style=style)
        parts.append(table)
        if node.rows.size > ROWS_SHOWN:
            parts.append(Text("… {:,} more rows".format(node.rows.size - ROWS_SHOWN), style="dim"))
        parts += _stack(piece, int(node.rows[0]))
    if node.children:
        parts.append(Text("{} record(s) inside; enter opens them".format(len(node.children)), style="dim"))
    return Group(*parts)


def _stack(piece: Piece, i: int) -> List[RenderableType]:
    stack = str(piece.rows.stack[i] or "")
    lines = [line for line in stack.splitlines() if line.strip()]
    if not lines:
        return []
    return [Text("stack (innermost last)", style="bold"), Text("\n".join(lines[-STACK_LINES:]), style="dim")]


def tensor_detail(piece: Piece, i: int, preview: Optional[Preview] = None, error: str = "",
                  width: int = 40) -> RenderableType:
    rows = piece.rows
    parts: List[RenderableType] = [Text(str(rows.name[i]), style="bold"),
                                   Text("{} · rank {} · step {}".format(IO_NAMES[int(rows.io[i])], piece.rank,
                                                                       piece.step), style="dim")]
    kind = [dtype_text(rows.dtype[i])]
    if rows.is_tensor[i]:
        kind.append(str(rows.shape[i]))
        if rows.numel[i] >= 0:
            kind.append("{:,} elements".format(int(rows.numel[i])))
    if rows.requires_grad[i] >= 0:
        kind.append("requires_grad " + ("yes" if rows.requires_grad[i] else "no"))
    parts.append(Text(" · ".join(kind)))
    if rows.text[i] is not None:
        parts.append(Text.assemble(("value ", "bold"), str(rows.text[i])))
    stats = Text()
    for stat in ("max", "min", "mean", "norm"):
        stats.append(stat + " ", style="bold")
        stats.append(_stat(piece, i, stat) + "  ")
    parts.append(stats)
    extra = []
    if rows.nonfinite[i] >= 0:
        extra.append(("inf/nan {:,}".format(int(rows.nonfinite[i])), themed("bold error") if rows.nonfinite[i] else ""))
    if rows.crc32[i]:
        extra.append(("crc32 " + str(rows.crc32[i]), ""))
    if rows.data_name[i]:
        extra.append(("file " + str(rows.data_name[i]), "dim"))
    if extra:
        line = Text()
        for n, (text, style) in enumerate(extra):
            line.append((" · " if n else "") + text, style=style)
        parts.append(line)
    if rows.data[i] < 0:
        if rows.is_tensor[i]:
            parts.append(Text("statistics only: no values stored for this tensor", style="italic dim"))
    elif error:
        parts.append(Text(error, style=themed("error")))
    elif preview is None:
        parts.append(Text("reading values…", style="italic dim"))
    else:
        parts += _preview(preview, width)
    parts += _stack(piece, i)
    return Group(*parts)


def _preview(preview: Preview, width: int) -> List[RenderableType]:
    out: List[RenderableType] = []
    title = "tensor[{}]".format(preview.index) if preview.index else "first values"
    values = np.asarray(preview.values)
    shape = " shape {}".format(list(values.shape)) if preview.index else ""
    out.append(Text(title + shape, style="bold"))
    with np.printoptions(precision=4, threshold=64, edgeitems=3, linewidth=max(20, width)):
        out.append(Text(np.array2string(values, separator=", ")))
    hist = preview.histogram
    if hist is not None:
        out.append(Text("histogram", style="bold"))
        out.append(histogram_text(hist.counts, hist.edges, width=width, log=hist.log, nan=hist.nan,
                                  posinf=hist.posinf, neginf=hist.neginf, zeros=hist.zeros))
    return out

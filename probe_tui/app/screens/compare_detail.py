"""The compare browser's detail pane: one row with both sides' statistics and every metric, a suspect, a tree
node. Plain functions from dicts to rich renderables (tested without an app)."""

from typing import Any, Dict, List, Optional

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from engines.compare.divergence import PHASES, SUSPECT_KINDS
from engines.compare.suspects import suspect_record
from engines.compare.verdicts import VERDICTS
from engines.dumps.rows import DIR_NAMES, IO_NAMES, KIND_NAMES
from probe_tui.app.data.compare_result import VERDICT_STYLES
from probe_tui.app.styles import themed
from probe_tui.app.widgets.dump_tree import dtype_text
from probe_tui.formatting import number_text

STATS = ("max", "min", "mean", "norm")
NOTES = ("", "N/A", "Diff")
TENSOR_METRICS = (("rel_err", "rel_err ‖t−g‖/‖g‖"), ("cosine", "cosine"), ("euc_dist", "euclidean distance"),
                  ("max_abs_err", "max abs error"), ("max_rel_err", "max rel error"),
                  ("one_thousandth", "1‰ error ratio"), ("five_thousandths", "5‰ error ratio"))
STACK_LINES = 6


def _grid() -> Table:
    table = Table(box=None, show_header=True, padding=(0, 1), expand=False, header_style="bold")
    return table


def _name(value: Any, fallback: str = "") -> str:
    return str(value) if value not in (None, "") else fallback


def _dtype(value: Any) -> str:
    return dtype_text(_name(value, "—"))


def _flag(value: Any) -> str:
    return {-1: "—", 0: "no", 1: "yes"}.get(int(value), str(value)) if value is not None else "—"


def verdict_label(code: int) -> Text:
    code = int(code)
    return Text(" {} ".format(VERDICTS[code]), style=themed("reverse " + (VERDICT_STYLES.get(code) or "success")))


def row_detail(row: Dict[str, Any], mode: str) -> RenderableType:
    """A result row: header, reasons, a target/golden/diff/rel table of the statistics, the metrics, the stack."""
    parts: List[RenderableType] = []
    head = Text.assemble(verdict_label(row.get("verdict", 0)), " ", (row.get("target_name", ""), "bold"))
    parts.append(head)
    where = "rank {} · step {} · row {:,} · {} · {} · {}".format(
        row.get("rank"), row.get("step"), row.get("row", 0), IO_NAMES[int(row.get("io", 4))],
        KIND_NAMES[int(row.get("kind", 0))] if int(row.get("kind", 0)) < len(KIND_NAMES) else "",
        DIR_NAMES[int(row.get("direction", 2))])
    parts.append(Text(where, style="dim"))
    golden = _name(row.get("golden_name"))
    if not row.get("matched"):
        parts.append(Text("no golden row matched", style=themed("muted")))
    elif golden and golden != row.get("target_name"):
        parts.append(Text("golden: " + golden, style="italic"))
    reasons = _name(row.get("reasons"))
    if reasons:
        parts.append(Text(reasons, style=themed(VERDICT_STYLES.get(int(row.get("verdict", 0))) or "")))
    stats = _grid()
    for label in ("", "target", "golden", "diff", "rel"):
        stats.add_column(label, justify="right" if label else "left", no_wrap=True, min_width=4 if label else 4)
    for s in STATS:
        note = int(row.get(s + "_note", 0) or 0)
        rel = NOTES[note] if note else number_text(row.get(s + "_rel"), 3)
        stats.add_row(s, number_text(row.get("t_" + s)), number_text(row.get("g_" + s)),
                      number_text(row.get(s + "_diff"), 3), rel)
    parts.append(stats)
    sides = _grid()
    for label in ("", "target", "golden"):
        sides.add_column(label, no_wrap=True, min_width=5 if not label else None)
    sides.add_row("dtype", _dtype(row.get("target_dtype")), _dtype(row.get("golden_dtype")))
    sides.add_row("shape", _name(row.get("target_shape"), "—"), _name(row.get("golden_shape"), "—"))
    sides.add_row("grad", _flag(row.get("target_requires_grad")), _flag(row.get("golden_requires_grad")))
    if row.get("t_text") or row.get("g_text"):
        sides.add_row("value", _name(row.get("t_text"), "—"), _name(row.get("g_text"), "—"))
    if row.get("target_crc32") or row.get("golden_crc32"):
        sides.add_row("crc32", _name(row.get("target_crc32"), "—"), _name(row.get("golden_crc32"), "—"))
    parts.append(sides)
    metrics = _grid()
    metrics.add_column("metric", no_wrap=True)
    metrics.add_column("value", justify="right", no_wrap=True)
    shown = TENSOR_METRICS if mode == "tensor" else TENSOR_METRICS[:1]
    for key, label in shown:
        metrics.add_row(label, number_text(row.get(key), 6))
    parts.append(metrics)
    stack = _name(row.get("stack"))
    if stack:
        lines = [line for line in stack.splitlines() if line.strip()]
        parts.append(Text("stack (innermost last)", style="bold"))
        parts.append(Text("\n".join(lines[-STACK_LINES:]), style="dim"))
    return Group(*parts)


def suspect_detail(table: Dict[str, Any], i: int, row: Optional[Dict[str, Any]], mode: str) -> RenderableType:
    """A first-divergence row: why it ranks where it does, then its first result row."""
    kind = int(table["kind"][i])
    parts: List[RenderableType] = [
        Text.assemble(("#{} suspect ".format(int(table["position"][i])), "bold reverse"), " ",
                      (suspect_record(table, i), "bold")),
        Text("{} · {} · rank {} · step {}".format(SUSPECT_KINDS[kind] if kind < len(SUSPECT_KINDS) else kind,
                                                 PHASES[int(table["phase"][i])], int(table["rank"][i]),
                                                 int(table["step"][i])), style="dim"),
        Text("score {} = out err {} / max(in err {}, floor {})".format(
            number_text(table["score"][i]), number_text(table["out_err"][i]), number_text(table["in_err"][i]),
            number_text(table["floor"][i]))),
    ]
    for key in ("changed_args", "note"):
        if table[key][i]:
            parts.append(Text(str(table[key][i]), style="italic"))
    if table["parent"][i]:
        parts.append(Text("in " + str(table["parent"][i]), style="dim"))
    if row is not None:
        parts += [Text(""), Text("worst row of the record", style="bold underline"), row_detail(row, mode)]
    return Group(*parts)


def node_detail(columns: Dict[str, Any], name: str, row: Optional[Dict[str, Any]], mode: str) -> RenderableType:
    """A tree node: counts of itself and everything below it, worst metrics, then its first row."""
    verdict = int(columns["worst_verdict"])
    counts = Text.assemble(
        ("{:,} rows: ".format(int(columns["n_rows"]))), ("{:,} error".format(int(columns["n_error"])), themed("error")), " · ",
        ("{:,} warning".format(int(columns["n_warning"])), themed("warning")), " · ", "{:,} pass".format(int(columns["n_pass"])),
        " · ", ("{:,} unmatched".format(int(columns["n_unmatched"])), themed("muted")))
    parts: List[RenderableType] = [
        Text.assemble(verdict_label(verdict), " ", (name, "bold")),
        counts,
        Text("largest rel_err {} · smallest cosine {} · best suspect score {}".format(
            number_text(columns["max_rel_err"]), number_text(columns["min_cosine"]),
            number_text(columns["max_score"])), style="dim"),
    ]
    if row is not None:
        parts += [Text(""), Text("first row", style="bold underline"), row_detail(row, mode)]
    return Group(*parts)

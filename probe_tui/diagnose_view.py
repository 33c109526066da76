"""The readable report of a diagnose (``verdict.json``): the verdict first, then its evidence, the stages, the disk."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from probe_tui.formatting import format_bytes


def read_verdict(path: Any) -> Optional[Dict[str, Any]]:
    """The verdict of a diagnose result folder (or its verdict.json); None when there is none."""
    p = Path(path)
    if p.is_dir():
        p = p / "verdict.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "verdict" in data else None


def _err(v: Optional[float]) -> str:
    return "-" if v is None else "{:.3g}".format(v)


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else "{:.2%}".format(v)


def report_lines(verdict: Dict[str, Any]) -> List[str]:
    """The report as rich markup lines (the app shows the same lines)."""
    lines: List[str] = []
    ev = verdict.get("culprit") or {}
    kind = verdict.get("verdict")
    if ev:
        lines.append("[bold red]Culprit: {}[/]".format(ev.get("op")))
        where = ["module " + ev["module"]] if ev.get("module") else []
        where += ["step {}".format(ev.get("step")), "rank {}".format(ev.get("rank"))]
        if ev.get("where"):
            where.append(ev["where"])
        lines.append("  " + " · ".join(where))
        lines.append("  inputs match the golden: {}; output differs: {}".format(
            "yes" if ev.get("inputs_match") else "no", "yes" if ev.get("output_differs") else "no"))
        lines.append("  error added {} (output {} against inputs {}; the dtypes explain {}); score {}".format(
            _err(ev.get("error_added")), _err(ev.get("out_err")), _err(ev.get("in_err")),
            _err(ev.get("explained_err")), _err(ev.get("score"))))
        if ev.get("members") and len(ev["members"]) > 1:
            lines.append("  target-only ops {} (feeding {})".format(" ".join(ev["members"]), ev.get("feeds")))
    elif kind == "no difference":
        lines.append("[bold green]No difference: no op's output differs between the two runs[/]")
    else:
        lines.append("[bold yellow]No single culprit[/]: no op stands out; the error is spread over the model")
    decided = verdict.get("decided_by", "")
    outcome = verdict.get("stage2_outcome")
    lines.append("Decided by {}{}".format(decided, {
        "confirmed": ": tensors confirmed the statistics' suspect",
        "overruled": ": tensors overruled the statistics' suspect",
        "decided": ": the statistics were inconclusive",
        "inconclusive": ": tensors were inconclusive too"}.get(outcome or "", "")))
    if verdict.get("reason"):
        lines.append("  why: " + str(verdict["reason"]))
    return lines


def print_report(verdict: Dict[str, Any], stream: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    width = None if getattr(stream, "isatty", lambda: False)() else 120
    console = Console(file=stream, highlight=False, soft_wrap=False, width=width)
    console.print("[bold]Diagnose[/] {} against {}".format(verdict.get("target"), verdict.get("golden")))
    for line in report_lines(verdict):
        console.print(line)
    ev = verdict.get("culprit") or {}
    if ev.get("inputs") or ev.get("outputs"):
        table = Table(title="Evidence: error against the golden (norm-wise relative)", title_justify="left",
                      show_edge=False, pad_edge=False)
        for col in ("", "tensor", "rel err", "matches"):
            table.add_column(col)
        for item in ev.get("inputs", []):
            table.add_row("input", item["name"], _err(item["err"]), "yes" if item.get("matches") else "no")
        for item in ev.get("outputs", []):
            table.add_row("output", item["name"], _err(item["err"]), "")
        console.print(table)
    if ev.get("stack"):
        console.print("[dim]Call stack (innermost frames):[/]")
        for line in ev["stack"][-8:]:
            console.print("  [dim]" + line.replace("[", "\\[") + "[/]")
    shares = verdict.get("module_shares") or []
    if shares and not ev:
        table = Table(title="Share of the error added, per top-level module (forward and backward API ops)",
                      title_justify="left", show_edge=False, pad_edge=False)
        for col in ("module", "share", "ops", "largest op"):
            table.add_column(col)
        for s in shares[:12]:
            table.add_row(s["module"], "{:.1%}".format(s["share"]), str(s["ops"]), s["largest_op"])
        console.print(table)
    for stage in ("stage1", "stage2"):
        info = verdict.get(stage) or {}
        j = info.get("judgement")
        name = "Stage 1 (statistics)" if stage == "stage1" else "Stage 2 (tensors)"
        if j is None:
            console.print("{}: did not run: {}".format(name, info.get("why_not", "")))
            continue
        top = (j.get("top") or {}).get("op") or (j.get("top") or {}).get("record")
        text = "{}: {}{}".format(name, "conclusive" if j.get("conclusive") else "inconclusive",
                                 ", top suspect " + top if top else "")
        if stage == "stage2" and info.get("records"):
            text += " ({} call(s) captured at step {})".format(len(info["records"]), info.get("step"))
        console.print(text)
        if stage == "stage1" and (info.get("first_differing_op") or info.get("largest_error_op")):
            console.print("  [dim]naive rules: first differing op {}, largest error op {}[/]".format(
                info.get("first_differing_op") or "-", info.get("largest_error_op") or "-"))
    disk = verdict.get("disk") or {}
    if disk.get("stage2_disk_bytes"):
        console.print("Disk: stage 2 wrote {} ({} of a full tensor dump of the stage-1 steps, {})".format(
            format_bytes(disk["stage2_disk_bytes"]), _pct(disk.get("fraction_of_full_dump")),
            format_bytes(disk.get("full_dump_bytes"))))
    elif disk.get("full_dump_bytes"):
        console.print("Disk: stage 2 wrote nothing (a full tensor dump of the stage-1 steps: {})".format(
            format_bytes(disk["full_dump_bytes"])))

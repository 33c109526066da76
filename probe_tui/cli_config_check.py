"""``probe-tui config-check pack|compare`` (docs/CONFIG_CHECK.md). The task itself (weights, batches, seeds of a
training run) is ``probe-tui --run`` of a ``config_check`` config; ``pack`` takes the static facts here, now."""

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List

from probe_tui.cli_output import fail, print_json

EXIT_FINDINGS = 3


def add_parser(sub: Any) -> None:
    p = sub.add_parser("config-check", help="fingerprint a training setup (pack) and compare two (compare)",
                       description="pack: the static facts of this machine and command now (environment, packages, "
                                   "framework and device, arguments, config files). A config_check config run with "
                                   "--run adds the weights, the first batches, seeds and flags of a training run. "
                                   "compare: what differs between two packs, most likely to change the numbers "
                                   "first.")
    cc = p.add_subparsers(dest="cc_command", metavar="ACTION")
    q = cc.add_parser("pack", help="write a pack of this setup now (no training run)")
    q.add_argument("-o", "--output", metavar="FILE", default="config_check.json",
                   help="pack file to write (default config_check.json; must not exist)")
    q.add_argument("--file", action="append", default=[], metavar="PATH", help="a config file to fingerprint "
                                                                                "(repeat for more)")
    q.add_argument("--framework", choices=["pytorch", "mindspore", "none"], default="none",
                   help="also record the framework's version and device (imports it)")
    q.add_argument("words", nargs=argparse.REMAINDER, metavar="-- SCRIPT ARGS", help="the training command to record")
    q.add_argument("--json", action="store_true", help="print the pack's summary as JSON")
    q = cc.add_parser("compare", help="what differs between packs A and B")
    q.add_argument("a", metavar="A", help="a pack file, or a config_check run folder (rank<R>/config_check.json)")
    q.add_argument("b", metavar="B", help="the other")
    q.add_argument("--rank", type=int, help="only this rank (default: every rank both have)")
    q.add_argument("--json", action="store_true", help="print the differences as JSON")
    q.add_argument("--view", action="store_true", help="open the differences in the app")
    q.add_argument("--fail-on-findings", action="store_true", help="exit 3 when anything differs")


def cmd_config_check(args: Any) -> int:
    if args.cc_command == "pack":
        return _pack(args)
    if args.cc_command == "compare":
        return _compare(args)
    return fail("config-check: say pack or compare (probe-tui config-check -h)")


def _pack(args: Any) -> int:
    from engines.config_check.session import CheckSession, write_pack

    out = Path(args.output)
    if out.exists():
        return fail("{}: already exists; choose a new file".format(out))
    words = list(args.words)
    if words and words[0] == "--":
        words = words[1:]
    framework = None if args.framework == "none" else args.framework
    session = CheckSession(None, files=args.file, script=words[0] if words else None, args=words[1:])
    session.start()
    if framework == "pytorch":
        from engines.frameworks import adapter_module

        try:
            session.pack["framework"].update(adapter_module("pytorch", "config_check").framework_facts())
        except ImportError as exc:
            return fail("--framework pytorch: cannot import it ({})".format(exc))
    elif framework == "mindspore":
        session.note("mindspore: the framework facts are not recorded by pack (run a config_check config)")
    pack = session.finish()
    try:
        write_pack(out, pack)
    except OSError as exc:
        return fail("{}: cannot write ({})".format(out, exc.strerror or exc))
    summary = {"pack": str(out), "environment_variables": len(pack["environment"]), "packages": len(pack["packages"]),
               "files": len(pack["files"]), "arguments": len(pack["command"]), "notes": pack["notes"]}
    if args.json:
        print_json(summary)
    else:
        from probe_tui.summary_view import print_mapping

        print_mapping(summary, stream=sys.stdout)
    return 0


def compare_paths(a: str, b: str, rank: Any = None) -> Dict[str, Any]:
    """{"a", "b", "ranks": [...], "differences": [...] (each with its rank)}; raises BadInputError."""
    from engines.config_check.diff import diff_packs
    from engines.config_check.session import PackError, find_packs, read_pack

    packs_a, packs_b = find_packs(a), find_packs(b)
    for path, found in ((a, packs_a), (b, packs_b)):
        if not found:
            raise PackError("{}: no config_check pack (a pack file, or a run folder with "
                            "rank<R>/config_check.json)".format(path))
    ranks = sorted(set(packs_a) & set(packs_b))
    if rank is not None:
        ranks = [r for r in ranks if r == rank]
    if not ranks:
        raise PackError("no rank in both {} ({}) and {} ({})".format(a, sorted(packs_a), b, sorted(packs_b)))
    rows: List[Dict[str, Any]] = []
    for r in ranks:
        for row in diff_packs(read_pack(packs_a[r]), read_pack(packs_b[r])):
            rows.append(dict(row, rank=r))
    from engines.config_check.diff import RANK

    rows.sort(key=lambda row: RANK[row["category"]])
    return {"a": a, "b": b, "ranks": ranks, "differences": rows}


def _compare(args: Any) -> int:
    from engines.errors import BadInputError

    try:
        result = compare_paths(args.a, args.b, args.rank)
    except BadInputError as exc:
        return fail(str(exc))
    rows = result["differences"]
    if args.json:
        print_json(result)
    elif args.view:
        from probe_tui.app.config_check_view import run_view

        run_view(result)
    else:
        _print_table(result)
    return EXIT_FINDINGS if rows and args.fail_on_findings else 0


def _print_table(result: Dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = result["differences"]
    console = Console(file=sys.stdout)
    if not rows:
        console.print("config-check: no difference between {} and {} (ranks {})".format(
            result["a"], result["b"], result["ranks"]))
        return
    table = Table(title="{} differences, most likely to change the numbers first".format(len(rows)))
    many = len(result["ranks"]) > 1
    if many:
        table.add_column("rank", justify="right")
    for name in ("category", "key", "A", "B"):
        table.add_column(name, overflow="fold")
    for row in rows:
        cells = [row["category"], row["key"], _shown(row["a"]), _shown(row["b"])]
        table.add_row(*([str(row["rank"])] if many else []) + cells)
    console.print(table)
    seen: List[str] = []
    for row in rows:
        if row["category"] not in seen:
            seen.append(row["category"])
            console.print("  {}: {}".format(row["category"], row["why"]))


def _shown(value: Any) -> str:
    if value is None:
        return "(absent)"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."

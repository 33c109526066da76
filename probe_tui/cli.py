"""The ``probe-tui`` command.

Every job is a config (docs/decisions/0006-every-job-is-a-config.md): ``--run CONFIG`` runs one headless; ``compare``, ``parse``,
``analyze-overflow`` and ``acc-check`` build the job config and run it the same way; with no command the app opens.
Exit codes (docs/decisions/0007-exit-codes.md): 0 done, 1 the target failed, 2 bad input, 3 findings with ``--fail-on-findings``.
"""

import argparse
import sys
import warnings
from typing import List, Optional

from probe_tui import __version__

EPILOG = """\
examples:
  probe-tui                                   open the app on the working directory
  probe-tui init statistics -o stats.json     write a starter config
  probe-tui validate stats.json               check it (every error, with its field)
  probe-tui --run stats.json                  run it headless (progress on stderr)
  torchrun --nproc_per_node=8 -m probe_tui run stats.json   the same on every rank, one run folder
  probe-tui compare RUN_A RUN_B               compare two runs (or msprobe dumps)
  probe-tui diagnose RUN_A RUN_B              name the op that introduced their difference, with evidence
  probe-tui merge-runs OUT node0/dump node1/dump   one run from a launch's node-local run folders
  probe-tui export RUN --format msprobe -o DIR    the run as msprobe's dump.json tree (its compare reads it)
  probe-tui config-check compare A B          what differs between two training setups

exit codes: 0 done, 1 the target failed, 2 bad input, 3 findings (with --fail-on-findings)
"""


def _add_job_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")
    parser.add_argument(
        "--fail-on-findings", action="store_true", help="exit 3 when the job finds problems (for CI use)"
    )
    parser.add_argument(
        "--events", metavar="FILE", help="also write progress events as JSON lines to FILE ('-' for stdout)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="probe-tui",
        description="Numerical-accuracy debugger for deep-learning training. With no command, opens the app.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"probe-tui {__version__}")
    parser.add_argument("--run", metavar="CONFIG", help="run the job in CONFIG headless (no TTY needed)")
    _add_job_flags(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # The same as --run, for launchers that parse options before the script's own: torchrun takes any '--run...'
    # as a prefix of its --run-path ('torchrun -m probe_tui run cfg.json').
    p = sub.add_parser("run", help="run the job in CONFIG headless, as --run CONFIG (use this form under torchrun)")
    p.add_argument("config", help="config file")
    _add_job_flags(p)

    p = sub.add_parser("open", help="open the app on PATH (a folder of runs, a run, a dump or a result)")
    p.add_argument("path", help="folder or run to open")

    p = sub.add_parser("validate", help="check a config and print it normalised, or every error with its field")
    p.add_argument("config", help="config file (ours or msprobe's config.json / monitor json)")
    p.add_argument("--estimate", action="store_true", help="also run one step to estimate bytes written per step")
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = sub.add_parser("schema", help="print the JSON Schema of a task (no TASK: list the tasks)")
    p.add_argument("task", nargs="?", help="task name, e.g. statistics")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = sub.add_parser("init", help="write a starter config for TASK")
    p.add_argument("task", help="task name, e.g. statistics")
    p.add_argument("-o", "--output", metavar="FILE", help="file to write (default: TASK.json)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")

    p = sub.add_parser("compare", help="compare two runs or dumps (ours or msprobe's): TARGET against GOLDEN")
    p.add_argument("target", help="the run under test (run folder, rank folder, dump.json or step folder)")
    p.add_argument("golden", help="the reference run")
    p.add_argument("-o", "--output", metavar="DIR", help="where to write the result")
    p.add_argument("--mode", choices=["auto", "tensor", "statistics", "md5"], default="auto")
    p.add_argument("--fuzzy", action="store_true", help="align names that differ (call indices, class names)")
    p.add_argument("--target-layout", metavar="LAYOUT",
                   help="the target's parallel layout when its dump records none, e.g. ranks=4,tp=2,pp=2 "
                        "(keys ranks, tp, pp, vpp, order)")
    p.add_argument("--golden-layout", metavar="LAYOUT", help="the golden's parallel layout, as --target-layout")
    p.add_argument("--workers", type=int, metavar="N",
                   help="processes comparing rank pairs at once (default: as many as cores and pairs allow)")
    p.add_argument("--top", metavar="N",
                   help="suspects the summary lists from the first-divergence ranking (default 10)")
    _add_job_flags(p)

    p = sub.add_parser("diagnose", help="find the op that introduced the difference between TARGET and GOLDEN: "
                                        "statistics first, then tensors of the suspects only")
    p.add_argument("target", help="the side under test: a run or dump, a statistics/tensor config (.json), a "
                                  "script (.py) or 'demo'")
    p.add_argument("golden", help="the reference side, same kinds as TARGET")
    p.add_argument("-o", "--output", metavar="DIR", help="where to write the result (verdict.json, the compares)")
    p.add_argument("--stats-only", action="store_true", help="stop after the statistics stage (no re-run)")
    p.add_argument("--suspects", metavar="N", help="top suspects stage 2 captures in tensors (default 3)")
    p.add_argument("--steps", metavar="N", help="steps stage 1 captures from a target it runs (default 1)")
    p.add_argument("--exact", action="store_true",
                   help="pair calls by exact name (default: aligned on name, shape and dtype, as compare --fuzzy)")
    _add_job_flags(p)

    p = sub.add_parser("analyze-overflow", help="replay the ops an overflow_check run flagged, in high precision")
    p.add_argument("path", help="overflow_check run folder (or its dump_path: the latest run)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64", help="replay precision")
    p.add_argument("-o", "--output", metavar="DIR", help="where to write the result")
    _add_job_flags(p)

    p = sub.add_parser("acc-check", help="replay every API of a tensor dump on a reference (the CPU) and judge it "
                                         "(msprobe's run_ut / acc_check)")
    p.add_argument("dump", metavar="DUMP", help="tensor dump: a run folder (or its dump_path), rank folder, or an "
                                                "msprobe dump.json / dump folder")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="where to write the results (a folder holding an interrupted check continues it)")
    p.add_argument("--workers", type=int, metavar="N", help="processes replaying APIs at once (default 1)")
    p.add_argument("--api", action="append", metavar="NAME", help="check only this API (repeatable), e.g. softmax")
    p.add_argument("--no-backward", action="store_true", help="replay forward calls only")
    p.add_argument("--reference-dtype", choices=["auto", "float64", "float32"],
                   help="the reference's dtype (default auto: float64 for float32 inputs, float32 for fp16/bf16)")
    p.add_argument("--reference-device", metavar="DEVICE",
                   help="where the reference runs (default cpu; PyTorch: cuda, cuda:1, npu:0)")
    _add_job_flags(p)

    p = sub.add_parser("api-precision-compare",
                       help="judge one device's acc_check result against a second device's, both against the same "
                            "reference (msprobe's api_precision_compare)")
    p.add_argument("npu", metavar="NPU_RESULT", help="the device under test: an acc_check result folder or its "
                                                      "accuracy_checking_details CSV")
    p.add_argument("gpu", metavar="GPU_RESULT", help="the trusted second device's result (same dump, same reference)")
    p.add_argument("-o", "--output", metavar="DIR", default=".", help="where to write the two CSVs (default .)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--fail-on-findings", action="store_true", help="exit 3 when an API is an error")

    p = sub.add_parser("reproduce", help="write a self-contained script + input file that reruns one API of a dump "
                                          "on a device and on the CPU reference")
    p.add_argument("source", metavar="RESULT_OR_DUMP", help="an acc_check result folder or a tensor dump")
    p.add_argument("op", metavar="OP_NAME", help="the API as the result CSV names it, e.g. Functional.softmax.0")
    p.add_argument("-o", "--output", metavar="DIR", default=".", help="where to write the two files (default .)")

    p = sub.add_parser("merge-runs", help="join the node-local run folders of one launch (same run-id) into OUT")
    p.add_argument("out", metavar="OUT", help="the merged run folder to create (must not exist)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders (or dump paths: their latest run)")
    p.add_argument("--link", action="store_true", help="hard-link the files instead of copying them (same disk)")
    p.add_argument("--json", action="store_true", help="print the merged run.json's figures as JSON")

    p = sub.add_parser("export", help="write a run in another tool's format (msprobe's dump.json tree)")
    p.add_argument("source", metavar="RUN", help="run folder, rank folder or dump_path (its latest run)")
    p.add_argument("--format", choices=["msprobe"], default="msprobe", help="output format (default msprobe)")
    p.add_argument("--tensor-format", choices=["auto", "pt", "npy"], default="auto",
                   help="tensor files of a tensor run: pt (msprobe's PyTorch compare reads only these; needs torch), "
                        "npy; auto: pt for a PyTorch run when torch is installed")
    p.add_argument("--backward-slots", choices=["msprobe", "probe-tui"], default="msprobe",
                   help="backward API outputs in msprobe's layout (default: what msprobe's compare expects of a "
                        "baseline) or ours, one per forward argument")
    p.add_argument("-o", "--output", metavar="DIR", required=True, help="folder to create (must not exist, or be empty)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    from probe_tui.cli_config_check import add_parser as add_config_check

    add_config_check(sub)

    p = sub.add_parser("parse", help="list, filter and inspect the records of a dump (ours or msprobe's)")
    p.add_argument("path", help="run folder, rank folder, dump.json or step folder")
    p.add_argument("--name", metavar="PATTERN", help="rows whose name contains PATTERN (glob with *?[, regex with re:)")
    p.add_argument("--step", type=int, help="only this step")
    p.add_argument("--rank", type=int, help="only this rank")
    p.add_argument("--nonfinite", action="store_true", help="only tensors holding inf or nan")
    p.add_argument("--collectives", action="store_true",
                   help="list the collective records (op, group, src/dst, reduce op, dtype, bytes, group_seq) and "
                        "the collectives the ranks disagree on")
    p.add_argument("--export-npy", metavar="DIR", help="export the selected tensors as .npy files")
    p.add_argument("--row", metavar="NAME", help="inspect one row (full name, e.g. Functional.linear.0.forward.output.0)")
    p.add_argument("--slice", metavar="INDEX", help="with --row: print tensor[INDEX], e.g. '0, :4'")
    p.add_argument("--hist", action="store_true", help="with --row: draw a histogram of its values")
    p.add_argument("--limit", type=int, default=200, help="rows to list (default 200)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    from probe_tui.cli_output import show_warning

    parser = build_parser()
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = show_warning
        return _dispatch(parser, args)


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        if args.run:
            if args.command:
                parser.error("--run takes no command")
            from probe_tui.cli_run import run_config_file

            return run_config_file(args.run, args)
        if args.command == "run":
            from probe_tui.cli_run import run_config_file

            return run_config_file(args.config, args)
        if args.command is None:
            return _open_app(None)
        if args.command == "open":
            return _open_app(args.path)
        if args.command in ("validate", "schema", "init"):
            from probe_tui import cli_config

            return getattr(cli_config, f"cmd_{args.command}")(args)
        from probe_tui import cli_run

        if args.command == "export":
            from probe_tui.cli_export import cmd_export

            return cmd_export(args)
        if args.command == "config-check":
            from probe_tui.cli_config_check import cmd_config_check

            return cmd_config_check(args)
        if args.command == "parse":
            from probe_tui.cli_parse import cmd_parse

            return cmd_parse(args)
        return getattr(cli_run, "cmd_" + args.command.replace("-", "_"))(args)
    except KeyboardInterrupt as exc:  # 130 on Ctrl-C, 143 on SIGTERM, 129 on SIGHUP (engines.runner)
        return 128 + int(getattr(exc, "signum", 2))


def _open_app(path: Optional[str]) -> int:
    from probe_tui.cli_output import fail

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return fail("the app needs a terminal; use 'probe-tui --run CONFIG' to run a job headless")
    from probe_tui.app import run_app

    return run_app(path) or 0


if __name__ == "__main__":
    raise SystemExit(main())

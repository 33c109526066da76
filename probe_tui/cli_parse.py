"""``probe-tui parse``: list and inspect the records of any dump (engines.parse does the work)."""

import sys

from probe_tui.cli_output import fail, print_json

BAR_WIDTH = 40


def cmd_parse(args) -> int:
    from engines.errors import BadInputError
    from engines.parse.inspect import histogram, parse, read_tensor, tensor_slice

    where = {"rank": args.rank, "step": args.step}
    if args.limit < 0:
        return fail(f"--limit: {args.limit} is below 0 (the number of rows to list)")
    try:
        if args.row:
            return _inspect_row(args, where, histogram, read_tensor, tensor_slice)
        if args.slice or args.hist:
            return fail("--slice and --hist need --row NAME")
        if getattr(args, "collectives", False):
            return _collectives(args)
        outcome = parse(args.path, name=args.name, step=args.step, rank=args.rank, nonfinite=args.nonfinite,
                        export_npy=args.export_npy, limit=args.limit)
    except BadInputError as exc:  # a damaged file met while reading: one line, exit 2
        return fail(str(exc))
    if args.json:
        print_json(outcome.summary)
        return 0
    from probe_tui.summary_view import print_mapping

    summary = dict(outcome.summary)
    summary.pop("listed", None)
    print_mapping(summary, stream=sys.stdout)
    if not summary.get("complete", True):
        print(f"(listed the first {args.limit} rows; reading stopped there, after {summary['read_pieces']} of "
              f"{summary['pieces']} rank/step pieces: narrow with --name/--step/--rank or raise --limit)")
    elif summary["rows"] > args.limit:
        print(f"(listed {args.limit} of {summary['rows']} rows; narrow with --name/--step/--rank or raise --limit)")
    return 0


def _collectives(args) -> int:
    from engines.parse.collectives import collectives
    from probe_tui.summary_view import print_mapping

    if args.nonfinite or args.export_npy:
        return fail("--collectives lists records: it does not combine with --nonfinite or --export-npy")
    found = collectives(args.path, name=args.name, step=args.step, rank=args.rank, limit=args.limit)
    if args.json:
        print_json(found)
        return 0
    print_mapping({"path": found["path"], "collectives": found["count"],
                   "mismatches": len(found["mismatches"]), "tables": found["tables"]}, stream=sys.stdout)
    if found["count"] > args.limit:
        print(f"(listed {args.limit} of {found['count']} collectives; narrow with --name/--step/--rank)")
    return 0


def _inspect_row(args, where, histogram, read_tensor, tensor_slice) -> int:
    import numpy as np

    if args.hist:
        hist = histogram(args.path, args.row, **where)
        if args.json:
            print_json({"row": args.row, "counts": hist.counts.tolist(), "edges": hist.edges.tolist(),
                        "nan": hist.nan, "posinf": hist.posinf, "neginf": hist.neginf})
            return 0
        top = max(int(hist.counts.max()), 1)
        print(args.row)
        for count, lo, hi in zip(hist.counts, hist.edges[:-1], hist.edges[1:]):
            bar = "█" * int(round(BAR_WIDTH * int(count) / top))
            print(f"{lo:>12.4g} .. {hi:<12.4g} {int(count):>9d} {bar}")
        print(f"nan {hist.nan}  +inf {hist.posinf}  -inf {hist.neginf}")
        return 0
    value = tensor_slice(args.path, args.row, args.slice, **where) if args.slice else read_tensor(
        args.path, args.row, **where)
    if args.json:
        print_json({"row": args.row, "shape": list(np.shape(value)), "values": np.asarray(value).tolist()})
        return 0
    with np.printoptions(threshold=200, edgeitems=4, linewidth=100):
        print(f"{args.row}  shape {list(np.shape(value))}  dtype {np.asarray(value).dtype}")
        print(np.asarray(value))
    return 0

"""``probe-tui export RUN --format msprobe -o DIR`` (engines/export does the work; docs/EXPORT.md)."""

import sys

from probe_tui.cli_output import fail, print_json


def cmd_export(args) -> int:
    from engines.errors import BadInputError
    from engines.export.msprobe import export_msprobe

    def say(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr)

    try:
        summary = export_msprobe(args.source, args.output, tensor_format=args.tensor_format,
                                 msprobe_slots=args.backward_slots == "msprobe", say=say)
    except BadInputError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail("{}: cannot write ({})".format(args.output, exc.strerror or exc))
    if args.json:
        print_json(summary)
        return 0
    from probe_tui.summary_view import print_mapping

    shown = dict(summary)
    skipped = shown.pop("skipped")
    if skipped:
        shown["skipped"] = "{} save() record(s) (msprobe keeps those in debug.json)".format(len(skipped))
    print_mapping(shown, stream=sys.stdout)
    return 0

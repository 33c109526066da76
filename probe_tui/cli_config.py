"""``validate``, ``schema`` and ``init``: config work that imports no framework (docs/decisions/0008-validate-and-estimate.md)."""

import json
import sys
from pathlib import Path

from engines import safe_fs
from probe_tui.cli_output import fail, print_json
from probe_tui.formatting import format_bytes


def load_or_report(source, *, label: str = ""):
    """Load a config; on errors print one line per error (``FILE: field: message (hint)``) and return None."""
    from schemas import ConfigError, load_config

    label = label or str(source)

    def warn(path, message):
        print(f"probe-tui: warning: {label}: {path}: {message}", file=sys.stderr)

    try:
        return load_config(source, on_warning=warn)
    except ConfigError as err:
        for issue in err.errors:
            # File-level problems name the file as their path: do not say it twice.
            where = f"{issue.path}: " if issue.path and issue.path != label else ""
            hint = f" ({issue.hint})" if issue.hint else ""
            print(f"probe-tui: error: {label}: {where}{issue.message}{hint}", file=sys.stderr)
        return None


def cmd_validate(args) -> int:
    from schemas import ConfigError, dump_config, load_config

    if args.json:
        warnings = []
        try:
            job = load_config(args.config, on_warning=lambda p, m: warnings.append({"path": p, "message": m}))
        except ConfigError as err:
            print_json({"ok": False, "errors": [issue.__dict__ for issue in err.errors]})
            return 2
        payload = {"ok": True, "warnings": warnings, "config": dump_config(job)}
        if args.estimate:
            payload["estimate_bytes_per_step"] = _estimate(job)
        print_json(payload)
        return 0
    job = load_or_report(args.config)
    if job is None:
        return 2
    print_json(dump_config(job))
    if args.estimate:
        estimate = _estimate(job)
        if estimate is None:
            print(f"probe-tui: no size estimate for task {job.task!r}", file=sys.stderr)
        else:
            print(f"estimated output: {format_bytes(estimate)} per step per rank", file=sys.stderr)
    print(f"probe-tui: {args.config}: valid {job.task} config", file=sys.stderr)
    return 0


def _estimate(job):
    from engines import registry

    estimator = registry.estimator(job.task)
    return None if estimator is None else int(estimator(job))


def cmd_schema(args) -> int:
    import schemas

    if not args.task:
        width = max(len(name) for name in schemas.TASKS)
        for name, model in schemas.TASKS.items():
            doc = (model.__doc__ or "").strip().splitlines()
            print(f"{name:<{width}}  {doc[0] if doc else ''}")
        print("\nprobe-tui schema TASK prints the JSON Schema of one task.", file=sys.stderr)
        return 0
    if args.task not in schemas.TASKS:
        return fail(f"unknown task {args.task!r}; tasks: {', '.join(schemas.TASKS)}")
    text = json.dumps(schemas.json_schema(args.task), indent=2) + "\n"
    if args.output:
        try:
            safe_fs.write_atomic(args.output, text)
        except (OSError, ValueError) as exc:
            return fail(f"--output {safe_fs.describe_os_error(args.output, exc)}")
        print(f"probe-tui: wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_init(args) -> int:
    import schemas

    if args.task not in schemas.TASKS:
        return fail(f"unknown task {args.task!r}; tasks: {', '.join(schemas.TASKS)}")
    out = Path(args.output or f"{args.task}.json")
    if out.exists() and not args.force:
        return fail(f"{out}: already exists (use --force to overwrite)")
    if not out.parent.exists():
        return fail(f"{out.parent}: no such directory")
    text = json.dumps(schemas.starter_config(args.task), indent=2) + "\n"
    try:
        safe_fs.write_atomic(out, text)
    except (OSError, ValueError) as exc:
        return fail(f"--output {safe_fs.describe_os_error(out, exc)}")
    print(f"probe-tui: wrote {out} (check it with: probe-tui validate {out})", file=sys.stderr)
    return 0

"""How the CLI talks: one-line errors on stderr, JSON on stdout when asked."""

import json
import sys
from typing import Any

EXIT_BAD_INPUT = 2


def fail(message: str, exit_code: int = EXIT_BAD_INPUT) -> int:
    """Print a one-line error naming what is wrong and return the exit code (2: bad input)."""
    first_line = " ".join(str(message).split("\n", 1)[0].split())
    print(f"probe-tui: error: {first_line}", file=sys.stderr)
    return exit_code


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the CLI: one line on stderr (a damaged run.json, commits that cannot be read
    back...), not Python's file-and-source-line form."""
    text = " ".join(str(message).split())
    print(f"probe-tui: warning: {text}", file=sys.stderr if file is None else file)


def print_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, default=str, allow_nan=True)
    sys.stdout.write("\n")
    sys.stdout.flush()

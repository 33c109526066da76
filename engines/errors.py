"""The one error class every kind of bad input ends in, and the exit codes every command and run ends with.

Readers of stores, dumps, mapping files and run folders each raise their own error (``StoreError``,
``DumpSourceError``, ``MappingError``, ...); all of them are :class:`BadInputError`, so the runner turns any of
them met by an analysis job into the job's ``JobError`` (exit code 2) in one place, and the CLI prints it as one
line. The message is forced onto one line here: HDF5 and JSON errors quoted inside it may span several.
"""

import signal
from typing import Any

#: Exit codes: the run finished; the training target failed; bad input; findings with
#: ``--fail-on-findings``; the target ran but nothing could be captured (it ran as compiled graphs).
EXIT_OK = 0
EXIT_TARGET_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_FINDINGS = 3
EXIT_NOT_CAPTURED = 4


def signal_exit_code(signum: int) -> int:
    """The exit code of a run a signal stopped: 128 + the signal's number, the shell's convention (130 for SIGINT,
    143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + int(signum)


EXIT_INTERRUPTED = signal_exit_code(signal.SIGINT)


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines included) turned into one space."""
    return " ".join(str(text).split())


class BadInputError(Exception):
    """A file, path or field that cannot be used. ``str()`` is one line naming it; exit code 2."""

    def __init__(self, *args: Any) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (one_line(args[0]),)
        super().__init__(*args)


class JobError(BadInputError):
    """Bad input discovered while starting a job (exit code 2): a missing target, a path that does not exist.
    Engines raise it (or their own subclass) for their job's fields; the runner lets it through as it is."""

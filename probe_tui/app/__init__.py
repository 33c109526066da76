"""The probe-tui terminal app (Textual).

``probe-tui`` (no arguments) calls :func:`run_app` on the working directory; ``probe-tui open PATH`` on PATH.
Importing this package imports Textual; ``import probe_tui`` does not import this package.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    from probe_tui.app.app import ProbeApp


def run_app(path: Optional[Union[str, Path]] = None) -> int:
    """Open the app on ``path`` (a folder to look for runs and configs in, a run folder, or a config file).

    Returns the process exit code: 0, or 2 when ``path`` does not exist.
    """
    try:
        app = build_app(path)
    except FileNotFoundError as exc:
        import sys

        print(f"probe-tui: {exc}", file=sys.stderr)
        return 2
    app.run()
    return int(app.return_code or 0)


def build_app(path: Optional[Union[str, Path]] = None) -> "ProbeApp":
    """The app :func:`run_app` runs: home lists the folder ``path`` points to; runs start in the working
    directory, as ``probe-tui --run CONFIG`` does (a config's ``./probe_dump`` lands where the app was started,
    not beside the config). Raises FileNotFoundError naming a path that does not exist."""
    from probe_tui.app.app import ProbeApp, resolve_start

    root, start = resolve_start(path)
    return ProbeApp(root, start=start, workdir=Path.cwd())


__all__ = ["build_app", "run_app"]

"""The probe-tui terminal app (Textual).

``probe-tui`` (no arguments) calls :func:`run_app` on the working directory; ``probe-tui open PATH`` on PATH.
Importing this package imports Textual; ``import probe_tui`` does not import this package.
"""

from pathlib import Path
from typing import Optional, Union


def run_app(path: Optional[Union[str, Path]] = None) -> int:
    """Open the app on ``path`` (a folder to look for runs and configs in, a run folder, or a config file).

    Returns the process exit code: 0, or 2 when ``path`` does not exist.
    """
    from probe_tui.app.app import ProbeApp, resolve_start

    try:
        root, start = resolve_start(path)
    except FileNotFoundError as exc:
        import sys

        print(f"probe-tui: {exc}", file=sys.stderr)
        return 2
    app = ProbeApp(root, start=start)
    app.run()
    return int(app.return_code or 0)


__all__ = ["run_app"]

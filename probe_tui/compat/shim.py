"""``python -m probe_tui.compat.shim SCRIPT [ARGS...]``: run an unchanged msprobe script on probe-tui.

The script runs as ``__main__`` with its own arguments and folder on ``sys.path`` (as ``python SCRIPT``), with
``import msprobe...`` resolving to probe-tui's stand-ins (``probe_tui.compat``). When a real msprobe is installed
the script keeps using it unless ``PROBE_TUI_MSPROBE_ALIAS=force`` is set (a warning says which one runs).
Works under launchers too: ``torchrun --nproc_per_node 2 -m probe_tui.compat.shim train.py``.
"""

import os
import runpy
import sys
from typing import List, Optional

from probe_tui.compat import enable_msprobe_alias

USAGE = "usage: python -m probe_tui.compat.shim SCRIPT [ARGS...]"


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    script = args[0]
    if not os.path.isfile(script):
        print("probe-tui: %s: no such script" % script, file=sys.stderr)
        return 2
    enable_msprobe_alias(force=os.environ.get("PROBE_TUI_MSPROBE_ALIAS", "") == "force")
    sys.argv = [script] + args[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())

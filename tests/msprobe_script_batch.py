"""Runs several msprobe example scripts (tests/fixtures/msprobe_scripts) one after the other in ONE process, each
as ``__main__`` in its own folder, as ``python SCRIPT`` would (one framework import for the lot: each script
alone costs a process start and a torch import).

    python tests/msprobe_script_batch.py ROOT NAME [NAME...]

``ROOT/NAME/`` holds the script and its ``config.json``; the script's stdout goes to ``ROOT/NAME/stdout.txt``,
an exception to ``ROOT/NAME/error.txt``. What a script leaves open (its debugger, a ``TrainerMon``) is closed
after it, as the interpreter's exit would; modules imported from its folder are forgotten.
"""

import contextlib
import os
import runpy
import sys
import traceback


def _close_leftovers(namespace: dict) -> None:
    from probe_tui.compat.msprobe_api import TrainerMon
    from probe_tui.debugger import PrecisionDebugger

    for value in list(namespace.values()):
        if isinstance(value, TrainerMon):
            value.stop()
    current = PrecisionDebugger._current
    if current is not None:
        current.close()


def run_one(root: str, name: str) -> None:
    folder = os.path.join(root, name)
    before = set(sys.modules)
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [name + ".py"]
    namespace: dict = {}
    with open("stdout.txt", "w", encoding="utf-8") as out, contextlib.redirect_stdout(out):
        try:
            namespace = runpy.run_path(name + ".py", run_name="__main__")
        except BaseException:
            with open("error.txt", "w", encoding="utf-8") as err:
                err.write(traceback.format_exc())
        finally:
            try:
                _close_leftovers(namespace)
            except BaseException:
                with open("error.txt", "a", encoding="utf-8") as err:
                    err.write(traceback.format_exc())
    sys.path.remove(folder)
    for mod in set(sys.modules) - before:
        if getattr(sys.modules[mod], "__file__", "") and str(sys.modules[mod].__file__).startswith(folder):
            del sys.modules[mod]


def main() -> None:
    root = os.path.abspath(sys.argv[1])
    for name in sys.argv[2:]:
        run_one(root, name)


if __name__ == "__main__":
    main()

"""Which screen opens which kind of folder.

Every way into a folder (home, ``probe-tui open PATH``, a finished run, a view's ``i`` (files) or ``d`` (dump)
key) goes through ``ProbeApp.open_path``. Without a kind, :func:`detect_kind` asks the registered openers in turn
(the first whose ``detect`` accepts the path wins) on a worker thread, since detectors read files; with one
(``kind="run"`` for the run summary), :func:`factory_for` builds that view at once. :func:`register_opener` puts a view in front
of the built-in ones (compare, grad-compare, overflow, free-benchmark, monitor, dump; then run and folder, which
both open the run summary).
"""

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from textual.screen import Screen


@dataclass
class Opener:
    kind: str
    """What the folder is ("run", "dump", "compare-result", ...)."""
    detect: Callable[[Path], bool]
    factory: Callable[[Path], Screen]


_OPENERS: List[Opener] = []


def register_opener(kind: str, detect: Callable[[Path], bool], factory: Callable[[Path], Screen],
                    *, first: bool = True) -> None:
    """Add an opener; ``first`` puts it before the ones already registered (more specific views win)."""
    opener = Opener(kind, detect, factory)
    if first:
        _OPENERS.insert(0, opener)
    else:
        _OPENERS.append(opener)


def openers() -> List[Opener]:
    _register_defaults()
    return list(_OPENERS)


def opener_for(path: Path) -> Optional[Opener]:
    for opener in openers():
        try:
            if opener.detect(path):
                return opener
        except OSError:
            continue
    return None


def detect_kind(path: Path) -> Optional[str]:
    """The kind of the first opener that accepts ``path`` (None: no view knows it). Reads files: call it off the
    UI thread."""
    opener = opener_for(path)
    return opener.kind if opener else None


def factory_for(kind: str) -> Optional[Callable[[Path], Screen]]:
    """The screen factory registered for ``kind`` (the first one, as detection would pick)."""
    for opener in openers():
        if opener.kind == kind:
            return opener.factory
    return None



def is_run_folder(path: Path) -> bool:
    return (Path(path) / "run.json").is_file()


def is_plain_folder(path: Path) -> bool:
    return Path(path).is_dir()


_defaults_done = False


def _register_defaults() -> None:
    global _defaults_done
    if _defaults_done:
        return
    _defaults_done = True
    from probe_tui.app.screens.summary import RunSummaryScreen

    # The built-in views, most specific first; then the generic fallbacks. Views registered later with
    # first=True still take precedence over all of these.
    for kind, detect, factory in _views():
        register_opener(kind, detect, factory, first=False)
    register_opener("run", is_run_folder, RunSummaryScreen, first=False)
    register_opener("folder", is_plain_folder, RunSummaryScreen, first=False)


def _screen(module: str, name: str) -> Callable[[Path], Screen]:
    """The factory of a built-in view: imports ``probe_tui.app.screens.<module>`` when a folder of its kind opens."""

    def factory(path: Path) -> Screen:
        return getattr(importlib.import_module("probe_tui.app.screens." + module), name)(path)

    return factory


def _views() -> List[tuple]:
    from probe_tui.app.data.check_results import is_free_benchmark_result, is_overflow_result
    from probe_tui.app.data.compare_result import is_compare_result
    from probe_tui.app.data.dump_index import is_dump
    from probe_tui.app.data.grad_result import is_grad_result
    from probe_tui.app.data.monitor_feed import is_monitor_run
    from probe_tui.app.screens.diagnose import is_diagnose_result

    return [
        ("diagnose", is_diagnose_result, _screen("diagnose", "DiagnoseScreen")),
        ("compare-result", is_compare_result, _screen("compare", "CompareScreen")),
        ("grad-compare", is_grad_result, _screen("grad", "GradScreen")),
        ("overflow", is_overflow_result, _screen("overflow", "OverflowScreen")),
        ("free-benchmark", is_free_benchmark_result, _screen("free_benchmark", "FreeBenchmarkScreen")),
        ("monitor", is_monitor_run, _screen("monitor", "MonitorScreen")),
        ("dump", is_dump, _screen("dump", "DumpScreen")),
    ]

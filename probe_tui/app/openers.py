"""Which screen opens which kind of folder.

Every way into a folder (home, ``probe-tui open PATH``, a finished run, a view's ``i`` (files) or ``d`` (dump)
key) goes through ``ProbeApp.open_path``. Without a kind, :func:`detect_kind` asks the registered openers in turn
(the first whose ``detect`` accepts the path wins) on a worker thread, since detectors read files; with one
(``kind="run"`` for the run summary), :func:`factory_for` builds that view at once. :func:`register_opener` puts a view in front
of the built-in ones (acc-check, compare, grad-compare, overflow, free-benchmark, online-check, monitor, dump; then run and folder, which
both open the run summary).
"""

import importlib
import os
import threading
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



WARM_READERS = ("engines.acc_check.results", "engines.acc_check.online", "engines.parse.inspect")
"""Modules the built-in views import as they read (:func:`warm_views`)."""


def warm_views() -> None:
    """Import the detectors, every built-in view's screen module and their readers now (any thread; home calls it
    once its listing is drawn): the first folder a user opens then pays no import, 50-130 ms of CPU at that key."""
    openers()
    for module in [*_SCREEN_MODULES, *WARM_READERS]:
        importlib.import_module(module)


def holds_runs(path: Path) -> bool:
    """A folder of runs (a ``dump_path``: run folders, a ``latest`` link), listed by home rather than opened."""
    path = Path(path)
    if (path / "run.json").is_file():
        return False
    if (path / "latest").exists():
        return True
    try:
        return any(entry.is_dir() and (Path(entry.path) / "run.json").is_file() for entry in os.scandir(path))
    except OSError:
        return False


def start_kind(path: Path) -> Optional[str]:
    """What ``probe-tui open PATH`` shows: ``"config"`` (a file no view knows: the config builder reads it), the
    kind of the view that opens ``path`` (a run, rank or step folder, a dump.json, a metrics.h5, a compare
    result...), or None for a folder to list on the home screen (a folder of runs, an empty folder). Reads
    files."""
    path = Path(path)
    if path.is_file():
        return detect_kind(path) or "config"
    if holds_runs(path):
        return None
    kind = detect_kind(path)
    return None if kind == "folder" else kind


def is_msprobe_dump_file(path: Path) -> bool:
    """msprobe's ``dump.json`` (or ``debug.json``) of one rank: the dump browser opens its rank folder."""
    from engines.dumps.msprobe.layout import DUMP_FILES

    path = Path(path)
    return path.is_file() and path.name in DUMP_FILES


def _dump_of_file(path: Path) -> Screen:
    from probe_tui.app.screens.dump import DumpScreen

    return DumpScreen(Path(path).parent)


def is_run_folder(path: Path) -> bool:
    return (Path(path) / "run.json").is_file()


def is_plain_folder(path: Path) -> bool:
    return Path(path).is_dir()


_defaults_done = False
_defaults_lock = threading.Lock()
"""Held while the built-in openers register: detection (a worker) and :func:`warm_views` (another) may ask at once."""


def _register_defaults() -> None:
    global _defaults_done
    if _defaults_done:
        return
    with _defaults_lock:
        if _defaults_done:
            return
        from probe_tui.app.screens.summary import RunSummaryScreen

        # The built-in views, most specific first; then the generic fallbacks. Views registered later with
        # first=True still take precedence over all of these.
        for kind, detect, factory in _views():
            register_opener(kind, detect, factory, first=False)
        register_opener("run", is_run_folder, RunSummaryScreen, first=False)
        register_opener("folder", is_plain_folder, RunSummaryScreen, first=False)
        _defaults_done = True


_SCREEN_MODULES: List[str] = []
"""The built-in views' screen modules (``_screen``)."""


def _screen(module: str, name: str) -> Callable[[Path], Screen]:
    """The factory of a built-in view: imports ``probe_tui.app.screens.<module>`` when a folder of its kind opens
    (or :func:`warm_views`)."""
    _SCREEN_MODULES.append("probe_tui.app.screens." + module)

    def factory(path: Path) -> Screen:
        return getattr(importlib.import_module("probe_tui.app.screens." + module), name)(path)

    return factory


def _views() -> List[tuple]:
    from probe_tui.app.data.check_results import is_free_benchmark_result, is_overflow_result
    from probe_tui.app.data.compare_result import is_compare_result
    from probe_tui.app.data.dump_index import is_dump
    from probe_tui.app.data.grad_result import is_grad_result
    from probe_tui.app.data.monitor_feed import is_monitor_run
    from probe_tui.app.screens.acc_check import is_acc_check_result
    from probe_tui.app.screens.diagnose import is_diagnose_result
    from probe_tui.app.screens.online_check import is_online_check_run

    return [
        ("diagnose", is_diagnose_result, _screen("diagnose", "DiagnoseScreen")),
        ("acc-check", is_acc_check_result, _screen("acc_check", "AccCheckScreen")),
        ("compare-result", is_compare_result, _screen("compare", "CompareScreen")),
        ("grad-compare", is_grad_result, _screen("grad", "GradScreen")),
        ("overflow", is_overflow_result, _screen("overflow", "OverflowScreen")),
        ("free-benchmark", is_free_benchmark_result, _screen("free_benchmark", "FreeBenchmarkScreen")),
        ("online-check", is_online_check_run, _screen("online_check", "OnlineCheckScreen")),
        ("monitor", is_monitor_run, _screen("monitor", "MonitorScreen")),
        ("dump", is_dump, _screen("dump", "DumpScreen")),
        ("dump-file", is_msprobe_dump_file, _dump_of_file),
    ]

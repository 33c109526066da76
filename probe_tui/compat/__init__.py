"""Stand-ins for msprobe's in-script imports, so msprobe scripts run on probe-tui (docs/MSPROBE.md).

Change the import line::

    from msprobe.pytorch import PrecisionDebugger, seed_all           # before
    from probe_tui.compat.msprobe.pytorch import PrecisionDebugger, seed_all   # after

or leave the script as it is and let ``msprobe`` resolve to these modules:

- ``python -m probe_tui.compat.shim train.py ARGS...`` (also ``torchrun ... -m probe_tui.compat.shim train.py``)
  runs the script with the alias on;
- ``probe_tui.compat.enable_msprobe_alias()`` turns it on in a process (a ``sitecustomize``, a launcher).

The alias never hides a real msprobe silently: when msprobe is importable, enabling the alias leaves it in place
and says so (a ``MsprobeAliasWarning``); ``force=True`` puts the alias in front of it, and says that too.
Importing this package imports no framework.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from typing import Any, Optional, Sequence

__all__ = ["enable_msprobe_alias", "disable_msprobe_alias", "alias_enabled", "MsprobeAliasWarning"]

_TARGET = "probe_tui.compat."
_NAME = "msprobe"


class MsprobeAliasWarning(UserWarning):
    """The msprobe alias was not enabled as asked, or shadows an installed msprobe."""


class _AliasLoader(importlib.abc.Loader):
    """Hands out the stand-in module itself under the ``msprobe`` name (one module object, one class identity)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return importlib.import_module(self.target)

    def exec_module(self, module: Any) -> None:
        return None


class _AliasFinder(importlib.abc.MetaPathFinder):
    """``msprobe`` and ``msprobe.*`` -> ``probe_tui.compat.msprobe...`` (only the modules the stand-in has)."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Any = None) -> Any:
        if fullname != _NAME and not fullname.startswith(_NAME + "."):
            return None
        real = _TARGET + fullname
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            return None
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real),
                                               is_package=found.submodule_search_locations is not None)


_finder: Optional[_AliasFinder] = None


def _real_msprobe() -> Optional[str]:
    """Where an installed msprobe is (None: none is importable)."""
    if _finder is not None:
        return None
    mod = sys.modules.get(_NAME)
    if mod is not None:
        return getattr(mod, "__file__", None) or repr(mod)
    try:
        spec = importlib.util.find_spec(_NAME)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or ", ".join(spec.submodule_search_locations or ()) or _NAME


def enable_msprobe_alias(force: bool = False) -> bool:
    """Make ``import msprobe.pytorch`` (and ``msprobe.mindspore``...) import probe-tui's stand-ins. Returns whether
    the alias is on. An installed msprobe is left in place unless ``force`` (both cases warn)."""
    global _finder
    if _finder is not None:
        return True
    real = _real_msprobe()
    if real is not None and not force:
        warnings.warn("msprobe is installed (%s): `import msprobe` keeps importing it; use "
                      "`from probe_tui.compat.msprobe.pytorch import ...` or enable_msprobe_alias(force=True)" % real,
                      MsprobeAliasWarning, stacklevel=2)
        return False
    if real is not None:
        warnings.warn("msprobe is installed (%s) but `import msprobe` now imports probe-tui's stand-ins (force=True)"
                      % real, MsprobeAliasWarning, stacklevel=2)
        for name in [n for n in sys.modules if n == _NAME or n.startswith(_NAME + ".")]:
            del sys.modules[name]
    _finder = _AliasFinder()
    sys.meta_path.insert(0, _finder)
    return True


def disable_msprobe_alias() -> None:
    """Turn the alias off (modules already imported under ``msprobe`` stay imported)."""
    global _finder
    if _finder is None:
        return
    try:
        sys.meta_path.remove(_finder)
    except ValueError:
        pass
    _finder = None
    for name in [n for n in sys.modules if n == _NAME or n.startswith(_NAME + ".")]:
        if getattr(sys.modules[name], "__name__", "").startswith(_TARGET):
            del sys.modules[name]


def alias_enabled() -> bool:
    return _finder is not None

"""The msprobe stand-ins (``probe_tui.compat``): the opt-in ``msprobe`` alias never hides a real msprobe silently,
hands out the stand-in modules themselves, and msprobe's calls behave as its docs say (docs/MSPROBE.md)."""

import sys
import warnings
from pathlib import Path

import pytest

from probe_tui import compat


@pytest.fixture
def clean_alias():
    compat.disable_msprobe_alias()
    saved = {n: m for n, m in sys.modules.items() if n == "msprobe" or n.startswith("msprobe.")}
    for n in saved:
        del sys.modules[n]
    yield
    compat.disable_msprobe_alias()
    for n in [n for n in sys.modules if n == "msprobe" or n.startswith("msprobe.")]:
        del sys.modules[n]
    sys.modules.update(saved)


@pytest.fixture
def fake_msprobe(tmp_path: Path, monkeypatch):
    """An installed msprobe (a package named msprobe on sys.path)."""
    pkg = tmp_path / "site" / "msprobe"
    (pkg / "pytorch").mkdir(parents=True)
    (pkg / "__init__.py").write_text("REAL = True\n")
    (pkg / "pytorch" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return pkg


def test_alias_resolves_msprobe_to_the_stand_ins(clean_alias):
    with pytest.raises(ModuleNotFoundError):
        __import__("msprobe.pytorch")
    assert compat.enable_msprobe_alias() is True
    import msprobe.mindspore.common.utils
    import msprobe.pytorch
    import msprobe.pytorch.common
    import msprobe.pytorch.monitor.module_hook

    import probe_tui.compat.msprobe.pytorch as stand_in

    assert msprobe.pytorch is stand_in  # one module object: one PrecisionDebugger class, one singleton
    assert msprobe.pytorch.PrecisionDebugger is stand_in.PrecisionDebugger
    assert msprobe.pytorch.common.seed_all is stand_in.seed_all
    assert msprobe.pytorch.monitor.module_hook.TrainerMon is stand_in.TrainerMon
    from msprobe.pytorch import module_dump, module_dump_end, seed_all  # noqa: F401
    with pytest.raises(ModuleNotFoundError):  # what the stand-in lacks is not invented
        __import__("msprobe.pytorch.api_accuracy_checker")
    compat.disable_msprobe_alias()
    assert "msprobe.pytorch" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        __import__("msprobe.pytorch")


def test_alias_leaves_an_installed_msprobe_in_place(clean_alias, fake_msprobe):
    with pytest.warns(compat.MsprobeAliasWarning, match="msprobe is installed"):
        assert compat.enable_msprobe_alias() is False
    assert not compat.alias_enabled()
    import msprobe.pytorch

    assert getattr(msprobe.pytorch, "REAL", False) is True


def test_forced_alias_shadows_an_installed_msprobe_and_says_so(clean_alias, fake_msprobe):
    import msprobe  # the real one, imported before the alias

    assert msprobe.REAL
    with pytest.warns(compat.MsprobeAliasWarning, match="now imports probe-tui's stand-ins"):
        assert compat.enable_msprobe_alias(force=True) is True
    import msprobe.pytorch

    assert not hasattr(msprobe.pytorch, "REAL")
    assert msprobe.pytorch.__name__ == "probe_tui.compat.msprobe.pytorch"


def test_shim_refuses_a_missing_script(tmp_path: Path, capsys):
    from probe_tui.compat.shim import main

    with warnings.catch_warnings():
        assert main([str(tmp_path / "nope.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    assert main([]) == 2


def test_class_calls_before_any_debugger(capsys):
    """msprobe 26: ``PrecisionDebugger.start()`` in model code with no debugger built (dumping switched off in
    the launcher) does nothing; probe_tui's own class keeps saying that the debugger is missing."""
    from probe_tui.compat.msprobe.pytorch import PrecisionDebugger as Compat
    from probe_tui.debugger import PrecisionDebugger

    assert PrecisionDebugger._current is None
    Compat.start()
    Compat.stop()
    Compat.step()
    Compat.start()
    err = capsys.readouterr().err
    assert err.count("PrecisionDebugger.start() called before any PrecisionDebugger was created: ignored") == 1
    with pytest.raises(RuntimeError, match="create PrecisionDebugger"):
        PrecisionDebugger.start()

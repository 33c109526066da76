"""The import rules of ARCHITECTURE.md, enforced.

- import-linter contracts in pyproject.toml (layers probe_tui -> engines -> schemas; schemas imports no framework,
  h5py or Textual; engines never imports the app);
- framework imports appear only in the adapter packages (any nesting level, lazy ones included);
- importing the packages (and every module outside the adapters and the app) loads no framework, and
  ``import probe_tui`` / ``from probe_tui import PrecisionDebugger`` load neither Textual nor a framework.
"""

import ast
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "engines", "probe_tui")
FRAMEWORKS = {
    "torch": "engines/adapters/torch/",
    "torch_npu": "engines/adapters/torch/",
    "mindspore": "engines/adapters/mindspore/",
}


def _python_files():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def _imported_roots(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def test_import_linter_contracts_hold():
    from importlinter.cli import lint_imports

    # import-linter configures logging with dictConfig, which disables every logger that exists (the native
    # kernel's included): later tests of this process would see none of their log lines
    loggers = [v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)]
    disabled = [(lg, lg.disabled) for lg in loggers]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0
    finally:
        os.chdir(cwd)
        for lg, was in disabled:
            lg.disabled = was


def test_frameworks_are_imported_only_in_their_adapters():
    offences = []
    for rel, path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for lineno, root in _imported_roots(tree):
            allowed_dir = FRAMEWORKS.get(root)
            if allowed_dir is not None and not rel.startswith(allowed_dir):
                offences.append(f"{rel}:{lineno} imports {root}")
    assert offences == []


def _modules_outside_adapters_and_app():
    names = []
    for rel, _ in _python_files():
        if rel.startswith(("engines/adapters/torch/", "engines/adapters/mindspore/", "probe_tui/app/")):
            continue
        if rel.endswith("__main__.py"):
            continue
        module = rel[:-3].replace("/", ".")
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        names.append(module)
    return names


def _loaded_after(code):
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_no_framework_is_loaded_outside_the_adapters():
    modules = _modules_outside_adapters_and_app()
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    loaded = _loaded_after(code)
    assert {"torch", "mindspore", "torch_npu"} & loaded == set()
    assert "textual" not in loaded


@pytest.mark.parametrize("statement", ["import probe_tui", "from probe_tui import PrecisionDebugger"])
def test_probe_tui_import_is_cheap(statement):
    try:
        loaded = _loaded_after(statement)
    except subprocess.CalledProcessError as exc:  # PrecisionDebugger must exist once capture lands
        pytest.fail(f"{statement!r} failed: {exc.stderr.strip().splitlines()[-1]}")
    assert {"torch", "mindspore", "torch_npu", "textual", "h5py"} & loaded == set()

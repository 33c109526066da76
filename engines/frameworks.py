"""Framework adapters, loaded by name.

Framework-neutral engines never import ``engines.adapters`` with an import statement: the adapters import those
engines (capture, store, overflow, ...), so an import back, even inside a function, would close an import cycle
(the import-linter contracts in pyproject.toml forbid it); and loading by name, when a framework is needed, keeps
torch and mindspore out of processes that never use them.
"""

import importlib
from typing import Any

ADAPTER_PACKAGES = {"pytorch": "engines.adapters.torch", "mindspore": "engines.adapters.mindspore"}


def adapter_module(framework: str, name: str) -> Any:
    """``engines.adapters.<torch|mindspore>.<name>``, imported now (None for a framework without an adapter).
    Raises ImportError as importing it does (the framework is not installed)."""
    package = ADAPTER_PACKAGES.get(framework)
    return importlib.import_module(package + "." + name) if package else None

"""One process's config_check: the static facts at start, the framework's hooks for what training does (random
state and flags at the first forward, the weights at init and after chosen steps, the first batches, the
optimizer's settings), and the pack at the end. Used by the ``config_check`` task (``--run``), the in-script
``probe_tui.config_check.ConfigCheck`` and, without hooks, ``probe-tui config-check pack``.
"""

from __future__ import annotations

import json
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from engines.config_check import collect
from engines.errors import BadInputError
from engines.safe_fs import PathLike, write_atomic
from schemas.config_check import ConfigCheckPack

PACK_NAME = "config_check.json"
Say = Callable[[str, str], None]


class PackError(BadInputError, ValueError):
    """A pack that cannot be read (one line naming the file; exit code 2)."""


class CheckSession:
    """Collects one pack. ``framework``: "pytorch" or "mindspore" (None: no framework hooks, static facts only)."""

    def __init__(self, framework: Optional[str], *, files: Sequence[str] = (), weight_steps: Sequence[int] = (),
                 data_batches: int = 2, script: Optional[str] = None, args: Sequence[str] = (), rank: int = 0,
                 world_size: int = 1, say: Optional[Say] = None,
                 on_step: Optional[Callable[[int], None]] = None) -> None:
        self.framework = framework
        self.files = list(files)
        self.weight_steps = sorted(set(int(s) for s in weight_steps))
        self.data_batches = int(data_batches)
        self.say = say or (lambda level, text: None)
        self.on_step = on_step
        self.pack: Dict[str, Any] = {
            "created": "", "host": socket.gethostname(), "rank": rank, "world_size": world_size,
            "environment": {}, "packages": {}, "framework": {}, "command": collect.command(script, args),
            "files": {}, "seeds": {}, "deterministic": {}, "hyperparameters": {}, "weights": {}, "data": {},
            "notes": []}
        self.hooks: Any = None
        self._started = False

    # -- what the adapter's hooks call --------------------------------------------------------------------------
    def first_forward(self, random_facts: Dict[str, str], deterministic: Dict[str, str]) -> None:
        self.pack["seeds"].update(collect.random_state())
        self.pack["seeds"].update(random_facts)
        self.pack["deterministic"].update(deterministic)

    def weights(self, label: str, checksums: Dict[str, str]) -> None:
        self.pack["weights"][label] = checksums

    def batch(self, index: int, checksums: List[str]) -> None:
        self.pack["data"]["batch{}".format(index)] = checksums

    def hyperparameters(self, values: Dict[str, str]) -> None:
        self.pack["hyperparameters"].update(values)

    def step_done(self, step: int) -> None:
        if self.on_step is not None:
            self.on_step(step)

    def note(self, text: str) -> None:
        if text not in self.pack["notes"]:
            self.pack["notes"].append(text)
            self.say("warning", "config_check: " + text)

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def start(self, model: Any = None) -> None:
        """Take the static facts and install the framework's hooks (``model``: the model to watch; else the first
        module called from outside any other module is taken for it)."""
        if self._started:
            return
        self._started = True
        self.pack["environment"] = collect.environment()
        self.pack["packages"] = collect.packages()
        self.pack["framework"] = collect.python_facts()
        self.pack["files"] = {f: collect.file_fingerprint(f) for f in self.files}
        if self.framework != "pytorch":  # no training to watch: a generator's state now says nothing about it
            self.pack["seeds"]["PYTHONHASHSEED"] = collect.random_state()["PYTHONHASHSEED"]
            if self.framework is not None:
                self.note("weights, batches, seeds and flags are captured on PyTorch only; {} runs get the static "
                          "facts".format(self.framework))
            return
        from engines.frameworks import adapter_module

        adapter = adapter_module("pytorch", "config_check")
        self.pack["framework"].update(adapter.framework_facts())
        self.hooks = adapter.TrainingHooks(self, model=model, weight_steps=self.weight_steps,
                                           data_batches=self.data_batches)
        self.hooks.install()

    def finish(self) -> Dict[str, Any]:
        """Remove the hooks; the pack as a validated dict."""
        if self.hooks is not None:
            try:
                self.hooks.remove()
            except Exception as exc:  # never let the tool's cleanup fail the run
                self.note("removing the hooks failed ({})".format(exc))
            self.hooks = None
        if self._started and self.framework == "pytorch" and not self.pack["weights"]:
            self.note("no model forward was seen: no weights, batches or random state were captured")
        self.pack["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return ConfigCheckPack.model_validate(self.pack).model_dump()


def write_pack(path: PathLike, pack: Dict[str, Any]) -> Path:
    return write_atomic(Path(path), json.dumps(pack, indent=1, sort_keys=False) + "\n")


def find_packs(path: PathLike) -> Dict[int, Path]:
    """rank -> pack file: a pack file, a rank folder holding one, a run folder (``rank<R>/config_check.json``) or a
    dump_path (its ``latest`` run)."""
    p = Path(path).expanduser()
    if p.is_file():
        return {0: p}
    if (p / PACK_NAME).is_file():
        return {0: p / PACK_NAME}
    found = {}
    for child in sorted(p.glob("rank*/" + PACK_NAME)):
        tail = child.parent.name[4:]
        if tail.isdigit():
            found[int(tail)] = child
    if not found and (p / "latest").exists():
        from engines.runs import resolve_latest

        target = resolve_latest(p)
        if target is not None and target != p:
            return find_packs(target)
    return found


def read_pack(path: Path) -> ConfigCheckPack:
    try:
        raw = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise PackError("{}: cannot read ({})".format(path, exc.strerror or exc)) from None
    except (ValueError, RecursionError) as exc:
        raise PackError("{}: not a config_check pack (not JSON: {})".format(path, exc)) from None
    try:
        return ConfigCheckPack.model_validate(raw)
    except Exception as exc:  # pydantic's ValidationError: name the first field
        errors: List[Dict[str, Any]] = list(getattr(exc, "errors", lambda: [])())
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
        what = errors[0]["msg"] if errors else str(exc)
        raise PackError("{}: not a config_check pack ({}{})".format(path, where + ": " if where else "", what)) \
            from None

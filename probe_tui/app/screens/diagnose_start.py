"""Home's diagnose key: ``d`` on a run marks it as the reference (golden); ``d`` on another run diagnoses that one
against it, in a child process like any run, and opens the verdict when it finishes."""

import json
import time
from pathlib import Path
from typing import Any, Optional

from probe_tui.app.screens.run import RunScreen

MARK = "_diagnose_golden"


class DiagnoseRunScreen(RunScreen):
    """The run screen of a diagnose: when the run finishes it gives way to the verdict."""

    def watch_status(self, status: str) -> None:
        super().watch_status(status)
        if status == "finished" and self.run_dir is not None:
            path = self.run_dir if self.run_dir.is_absolute() else self.cwd / self.run_dir
            self.app.call_later(self._land, path)

    def _land(self, path: Path) -> None:
        self.dismiss()
        self.app.open_path(path, kind="diagnose")


def write_config(root: Path, target: Path, golden: Path) -> Path:
    """A diagnose config for two runs, saved under ``<root>/probe_dump/diagnose/`` (it can be run again)."""
    folder = root / "probe_dump" / "diagnose"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "diagnose-{}.json".format(time.strftime("%Y%m%d-%H%M%S"))
    config = {"task": "diagnose", "comment": "Made by the app's diagnose key (home).",
              "dump_path": str(folder),
              "diagnose": {"target": {"path": str(target)}, "golden": {"path": str(golden)}}}
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return path


def diagnose_pressed(home: Any) -> None:
    """The key on home: mark the selected run as the reference, or diagnose it against the marked one."""
    selection = home._selection()
    if selection is None or selection[0] != "run":
        home.notify("Select a run: d marks the reference, then d on the run under test.", timeout=4)
        return
    run = Path(selection[1])
    golden: Optional[Path] = getattr(home, MARK, None)
    if golden is None or golden == run:
        setattr(home, MARK, run)
        home.notify("{} is the reference; press g on the run under test.".format(run.name), timeout=5,
                    title="Diagnose")
        return
    setattr(home, MARK, None)
    try:
        config = write_config(home.app.root, run, golden)
    except OSError as exc:
        home.notify("cannot write the diagnose config: {}".format(exc), severity="error")
        return
    app = home.app
    command = app.run_command + [str(config)] if app.run_command else None
    app.push_screen(DiagnoseRunScreen(config, cwd=app.root, command=command, env=app.run_env))

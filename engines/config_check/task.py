"""The ``config_check`` task object (``engines.task``): run the target and pack its setup into
``rank<R>/config_check.json`` (docs/CONFIG_CHECK.md).

Zero-code under ``--run``: ``begin()`` takes the static facts and installs the framework's global hooks, the
target runs, ``end()`` writes the pack. In a script, ``start(model)`` does what ``begin()`` does (watching that
model) and ``close()`` writes the pack.
"""

from typing import Any, Callable, Dict, Optional

from engines.collection import EXIT_OK, EXIT_TARGET_FAILED, CollectionResult
from engines.config_check import collect
from engines.config_check.session import PACK_NAME, CheckSession, write_pack
from engines.steps import StepReporter
from engines.task import Say, TaskContext, process_rank


class ConfigCheckTask:
    task = "config_check"
    seeds = True

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        self.ctx = ctx
        self.job = ctx.job
        self.run = run
        self.reporter = reporter
        self.say = say
        self.session: Optional[CheckSession] = None
        self.pack_path: Any = None
        self.pack: Dict[str, Any] = {}

    @property
    def steps(self) -> int:
        return self.reporter.steps

    def _session(self) -> CheckSession:
        if self.session is None:
            rank, world = process_rank()
            target = self.ctx.target or {}
            script = target.get("script") if isinstance(target, dict) else None
            args = list(target.get("args") or []) if isinstance(target, dict) else []
            if not target:  # in a script: the script is the target
                import sys

                script, args = (sys.argv[0] if sys.argv else None), list(sys.argv[1:])
            demo = target.get("demo") if isinstance(target, dict) else None
            section = self.job.config_check
            self.session = CheckSession(
                self.ctx.framework, files=section.files, weight_steps=section.weight_steps,
                data_batches=section.data_batches, script=script, args=args, rank=rank, world_size=world,
                say=self.say, on_step=None if self.ctx.is_demo else self.reporter.from_hook)
            if isinstance(demo, dict):  # the demo's knobs are its arguments
                values: Dict[str, str] = {}
                collect.flatten(demo, "", values)
                self.session.pack["command"].update({"demo." + k: v for k, v in values.items()})
            self.pack_path = self.run.rank_dir(rank) / PACK_NAME
        return self.session

    # -- the zero-code run ----------------------------------------------------------------------------------------
    def begin(self) -> None:
        self._session().start()

    def target_on_step(self) -> Optional[Callable[..., None]]:
        return self.reporter.from_target

    def end(self, status: str) -> None:
        if self.session is None or self.pack:
            return
        self.pack = self.session.finish()
        write_pack(self.pack_path, self.pack)

    def partial_summary(self) -> Dict[str, Any]:
        return self._summary()

    def _summary(self) -> Dict[str, Any]:
        pack = self.pack
        path = str(self.pack_path) if self.pack_path is not None else None
        return {"verdict": "pack written: {}".format(path) if pack else "no pack written", "pack": path,
                "environment_variables": len(pack.get("environment", {})), "packages": len(pack.get("packages", {})),
                "files": len(pack.get("files", {})), "weight_checkpoints": sorted(pack.get("weights", {})),
                "batches": len(pack.get("data", {})), "notes": list(pack.get("notes", []))}

    def outcome(self, result: Any) -> CollectionResult:
        summary = self._summary()
        if not result.ok:
            summary["error"] = result.error
            return CollectionResult(EXIT_TARGET_FAILED, summary)
        return CollectionResult(EXIT_OK, summary)

    # -- the in-script lifecycle ----------------------------------------------------------------------------------
    def start(self, model: Any = None) -> None:
        self._session().start(model)

    def stop(self) -> None:
        return None

    def step(self) -> None:
        return None

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        return None

    def monitor(self, target: Any) -> None:
        self.start(target)

    def close(self, status: str) -> Dict[str, Any]:
        self.end(status)
        return self._summary()

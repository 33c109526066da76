"""``statistics`` and ``tensor`` at level L2 on MindSpore: the kernels of graph-mode execution.

MindSpore's e2e kernel dump is switched on for the run (``MINDSPORE_DUMP_CONFIG``, read when the first graph
compiles) into ``<run>/graph_raw/``; when the target ends, every dumped iteration becomes a step of our dump
(the adapter's ``graph_records``) and the raw files are removed. No PyNative hook is installed: the training runs
as it would without the tool. MindSpore only (``engines.task.check_level`` refuses L2 elsewhere); ``--run`` only
(the dump must be configured before the script compiles its first graph). docs/MINDSPORE.md "Graph mode".
"""

import os
import shutil
from typing import Any, Callable, Dict, Optional

from engines.capture.engine import summary_for_cli
from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary
from engines.collection import EXIT_NOT_CAPTURED, EXIT_OK, EXIT_TARGET_FAILED, CollectionResult
from engines.frameworks import adapter_module
from engines.steps import StepReporter
from engines.task import Say, TaskContext, run_meta

_ENV = "MINDSPORE_DUMP_CONFIG"


class GraphCaptureTask:
    seeds = True

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        self.ctx = ctx
        self.run = run
        self.reporter = reporter
        self.say = say
        self.task = ctx.job.task
        # the capture options for the store, steps and precision (the PyNative levels' checks do not apply)
        self.options = self.capture_options(ctx.job.model_copy(update={"level": "L1"}))
        self.summary = CaptureSummary()
        self.raw = os.path.join(str(run.path), "graph_raw")
        self._saved_env: Optional[str] = None
        self._writers: Dict[int, Any] = {}

    @staticmethod
    def capture_options(job: Any) -> CaptureOptions:
        return CaptureOptions.from_job(job)

    @property
    def steps(self) -> int:
        return self.reporter.steps

    def begin(self) -> None:
        kernels = adapter_module(self.ctx.framework, "graph_kernels")
        self._saved_env = os.environ.get(_ENV)
        os.environ[_ENV] = kernels.write_config(self.raw, steps=self.options.steps)  # MindSpore's iterations

    def target_on_step(self) -> Optional[Callable[..., None]]:
        return self.reporter.from_target if self.ctx.is_demo else None

    def _writer(self, rank: int) -> Any:
        from engines.store import DumpWriter

        if rank not in self._writers:
            meta = run_meta(self.ctx, self.options)
            meta["run_meta"]["level"] = "L2"
            meta["rank"] = rank
            opts = self.options
            self._writers[rank] = DumpWriter(self.run.rank_dir(rank), meta=meta, mode=opts.store_mode,
                                             compression=opts.compression,
                                             compression_level=opts.compression_level,
                                             disk_budget=opts.disk_budget)
        return self._writers[rank]

    def _restore_env(self) -> None:
        if self._saved_env is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = self._saved_env

    def _close(self, status: str) -> None:
        """Close the stores and remove the raw kernel dump."""
        for writer in self._writers.values():
            self.summary.bytes += int(writer.bytes_written)
            writer.close(status)
        self._writers = {}
        shutil.rmtree(self.raw, ignore_errors=True)

    def end(self, status: str) -> None:
        self._restore_env()
        try:
            records = adapter_module(self.ctx.framework, "graph_records")
            steps = set(self.options.steps) if self.options.steps else None
            done = records.convert(os.path.join(self.raw, "raw"), self._writer,
                                   save_tensors=self.task == "tensor", high=self.options.precision == "high",
                                   steps=steps, highlights=self.summary.highlights)
            for per_rank in done.values():
                for step, (n_records, n_rows) in sorted(per_rank.items()):
                    self.summary.step_written(step, n_records, n_rows, 0)
        except Exception as exc:  # never a traceback for the user's run: the summary says what failed
            self.summary.failed("graph kernel dump conversion", exc)
        finally:
            self._close(status)

    def partial_summary(self) -> Dict[str, Any]:
        return summary_for_cli(self.summary, self.run)

    def close(self, status: str) -> Dict[str, Any]:
        self.end(status)
        return self.partial_summary()

    def outcome(self, result: Any) -> CollectionResult:
        out = summary_for_cli(self.summary, self.run)
        if not result.ok:
            out["error"] = result.error
            return CollectionResult(EXIT_TARGET_FAILED, out)
        if self.summary.records == 0:
            self.summary.not_captured_region("the target", "level L2 records the kernels of graph-mode execution "
                                             "and no graph ran (a PyNative run: use L1 or mix)")
            self.say("warning", "nothing was captured: no graph-mode kernel ran; see the notes")
            out = summary_for_cli(self.summary, self.run)
            return CollectionResult(EXIT_NOT_CAPTURED, out)
        return CollectionResult(EXIT_OK, out)

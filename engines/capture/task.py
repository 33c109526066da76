"""The ``statistics`` and ``tensor`` task object (``engines.task``), and the base of every capture-session task.

``SessionTask`` holds what the session tasks (statistics/tensor here, ``engines.overflow.task``,
``engines.free_benchmark.task``) share: msprobe's calls go to the session, the steps it closes go to the
reporter, and under ``--run`` the adapter's zero-code capture drives the same session (``begin``/``end``).
"""

from typing import Any, Callable, Dict, Optional, Tuple

from engines.capture.engine import refuse_a_second_writer, summary_for_cli
from engines.capture.options import CaptureOptions
from engines.capture.sink import dump_sink_factory
from engines.capture.summary import CaptureSummary
from engines.collection import EXIT_NOT_CAPTURED, EXIT_OK, EXIT_TARGET_FAILED, CollectionResult
from engines.steps import StepReporter
from engines.task import Say, TaskContext, run_meta


class RankLazy:
    """A rank's results writer, made when the first step reports (the session knows its rank by then: a script may
    initialise its process group after building the debugger, msprobe resolves it at the first start too)."""

    def __init__(self, session_rank: Callable[[], int], make: Callable[[int], Any]) -> None:
        self._session_rank = session_rank
        self._make = make
        self.value: Any = None
        self.rank: Optional[int] = None

    def get(self) -> Any:
        if self.value is None:
            self.rank = int(self._session_rank())
            self.value = self._make(self.rank)
        return self.value


class SessionTask:
    """A task run by a capture session (``self.session``, built by the subclass)."""

    task = ""
    seeds = True  # --run seeds the job's ``seed`` before building the task
    session: Any
    options: CaptureOptions

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        self.ctx = ctx
        self.run = run
        self.reporter = reporter
        self.say = say
        self.summary = CaptureSummary()
        self._capture: Any = None
        self._warned_save = False

    @property
    def steps(self) -> int:
        return self.reporter.steps

    # -- the in-script lifecycle -----------------------------------------------------------------------------
    def start(self, model: Any = None, token_range: Optional[Tuple[int, int]] = None,
              rank_id: Optional[int] = None) -> None:
        """msprobe's ``start(model, token_range, rank_id)`` (the arguments checked by the caller)."""
        if rank_id is not None:
            self.session.set_rank(rank_id)
        if token_range is not None:
            self.session.start_tokens(model, token_range[0], token_range[1])
        else:
            self.session.start(model)

    # msprobe's finer controls (engines.capture.script_controls, the adapter's module_dump)
    def set_init_step(self, step: int) -> None:
        self.session.set_init_step(step)

    def register_custom_api(self, module: Any, api: str, prefix: Optional[str] = None) -> None:
        self.session.register_custom_api(module, api, prefix)

    def restore_custom_api(self, module: Any, api: str) -> None:
        self.session.restore_custom_api(module, api)

    def module_dump(self, module: Any, name: str) -> None:
        self.session.module_dump(module, name)

    def module_dump_end(self) -> None:
        self.session.module_dump_end()

    def stop(self) -> None:
        self.session.stop()

    def step(self) -> None:
        step = self.session.step
        self.session.step_end()
        self.reporter.from_hook(step)

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        if not self._warned_save:  # msprobe: save() belongs to statistics/tensor; elsewhere it is skipped
            self._warned_save = True
            self.say("warning", "save(%r) is skipped: save() records values in statistics and tensor runs, this "
                                "one is %s" % (name, self.task))

    def monitor(self, target: Any) -> None:
        raise ValueError("task: monitor(model) starts grad_probe; this debugger's task is %s (use start/stop/step)"
                         % self.task)

    def close(self, status: str) -> Dict[str, Any]:
        self.end(status)
        return self.result_summary()

    # -- the zero-code run -----------------------------------------------------------------------------------
    def begin(self) -> None:
        self._capture = self.ctx.adapter("zero_code").ZeroCodeCapture(
            self.options, None, summary=self.summary, on_step_end=self.reporter.from_hook, session=self.session)
        self.before_run()
        self._capture.__enter__()

    def target_on_step(self) -> Optional[Callable[..., None]]:
        return self.reporter.from_target if self.ctx.is_demo else None

    def end(self, status: str) -> None:
        if self._capture is not None:
            self._capture.close(status)
        else:
            self.session.close(status)
        self.close_results(status)

    def partial_summary(self) -> Dict[str, Any]:
        return summary_for_cli(self.summary, self.run)

    # -- what the subclass brings ----------------------------------------------------------------------------
    def before_run(self) -> None:
        """Checks before the target runs under ``--run`` (the instrumentation is not installed yet)."""

    def close_results(self, status: str) -> None:
        """Close the task's own result stores."""

    def result_summary(self) -> Dict[str, Any]:
        raise NotImplementedError


class CaptureTask(SessionTask):
    """``statistics`` and ``tensor``: the capture session and its dump sink."""

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        super().__init__(ctx, run, reporter, say)
        self.task = ctx.job.task
        self.options = CaptureOptions.from_job(ctx.job)
        written: Dict[int, int] = {}  # step -> its records, once written
        nbytes_at = [0, 0]  # bytes written so far; bytes written when the last step event went out

        def on_written(step: int, records: int, nbytes: int) -> None:
            written[step] = records
            nbytes_at[0] += nbytes

        def details(step: int) -> Dict[str, Any]:
            """The step's records (written, or handed to the writer process and not written yet) and the bytes
            written since the previous step event: the step's own in this process, and with a writer process
            those of the steps it finished meanwhile (their sum is what the run has written so far)."""
            out: Dict[str, Any] = {}
            records = written.get(step)
            if records is None:
                records = getattr(self.session.sink, "handed", {}).get(step)
            if records is not None:
                out["records"] = records
            if nbytes_at[0] > nbytes_at[1]:
                out["bytes"], nbytes_at[1] = nbytes_at[0] - nbytes_at[1], nbytes_at[0]
            return out

        reporter.details = details
        sinks = dump_sink_factory(run.rank_dir, self.options, run_meta(ctx, self.options), self.summary,
                                  on_written)
        self.session = ctx.adapter("session").Session(self.options, sinks, summary=self.summary)

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        self.session.save(name, value, save_backward=save_backward)

    def before_run(self) -> None:
        refuse_a_second_writer(self.run, self.session.rank)

    def result_summary(self) -> Dict[str, Any]:
        return summary_for_cli(self.summary, self.run)

    def outcome(self, result: Any) -> CollectionResult:
        summary = self.summary
        if summary.store_refused:  # the same, found at the first step (the rank known only then): after training
            refuse_a_second_writer(self.run, None, summary.store_refused)
        out = summary_for_cli(summary, self.run)
        if not result.ok:
            out["error"] = result.error
        nothing = summary.bytes == 0 and summary.records == 0 and not summary.dump_stopped
        if summary.not_captured:
            return self._compiled_outcome(result, out, nothing)
        if nothing:
            self.say("warning", "nothing was captured: no selected step ran (check rank/step filters and the "
                                "target)")
        return CollectionResult(EXIT_OK if result.ok else EXIT_TARGET_FAILED, out)

    def _compiled_outcome(self, result: Any, out: Dict[str, Any], nothing: bool) -> CollectionResult:
        """Parts of the target ran as compiled graphs: 0 with a warning when records were written, else
        ``EXIT_NOT_CAPTURED`` (ARCHITECTURE.md "Exit codes")."""
        what = "; ".join(sorted(self.summary.not_captured))
        if nothing:
            self.say("warning", "nothing was captured: the target ran as compiled graphs (%s); see the notes" % what)
        else:
            self.say("warning", "partly captured: not recorded: %s; see the notes" % what)
        if not result.ok:
            return CollectionResult(EXIT_TARGET_FAILED, out)
        return CollectionResult(EXIT_NOT_CAPTURED if nothing else EXIT_OK, out)

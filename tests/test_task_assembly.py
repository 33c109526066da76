"""Each task is built once: ``probe-tui --run`` and ``PrecisionDebugger`` drive the same task object
(``engines/<task>/task.py``, ARCHITECTURE.md "Task assembly"); every framework adapter holds what
``engines.adapters.protocol`` says; the session's zero-code state changes through its own methods."""

import importlib

import pytest

from engines import registry
from engines.adapters.protocol import ADAPTER_MODULES
from engines.steps import StepReporter
from engines.task import ADAPTER_PACKAGES

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _frameworks():
    out = ["pytorch"]
    try:
        importlib.import_module("mindspore")
        out.append("mindspore")
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("framework", _frameworks())
def test_every_adapter_holds_what_the_protocol_lists(framework):
    missing = []
    for module, names in ADAPTER_MODULES.items():
        mod = importlib.import_module("%s.%s" % (ADAPTER_PACKAGES[framework], module))
        missing += ["%s.%s" % (module, n) for n in names if not hasattr(mod, n)]
    assert missing == []


@pytest.mark.parametrize("task", ["statistics", "tensor", "overflow_check", "free_benchmark", "grad_probe"])
def test_the_in_script_debugger_drives_the_task_object_run_builds(tmp_path, task):
    from probe_tui import PrecisionDebugger

    debugger = PrecisionDebugger(task=task, dump_path=str(tmp_path))
    try:
        assert type(debugger.runner) is registry.task_class(task)
        assert type(debugger.runner).__module__.startswith("engines.")
    finally:
        debugger.close()


def test_one_reporter_announces_each_step_once():
    seen = []

    class Events:
        def emit(self, kind, **fields):
            seen.append((kind, fields["step"], fields["loss"], fields.get("records")))

    demo = StepReporter(Events(), 2, target_reports_steps=True)
    demo.details = lambda step: {"records": 10 + step}
    demo.from_hook(0)  # the optimizer hook of a demo step: the demo reports it itself, with its loss
    demo.from_target(0, 1.5)
    script = StepReporter(Events(), None, target_reports_steps=False)
    script.from_hook(0)
    script.from_target(0, 2.0)  # a callable's own on_step is not a second announcement
    assert seen == [("step", 0, 1.5, 10), ("step", 0, None, None)]
    assert (demo.steps, script.steps, demo.sorted_losses()) == (1, 1, [1.5])


def test_zero_code_arms_a_step_and_records_from_its_first_module_call(tmp_path):
    from engines.adapters.torch.session import Session
    from engines.capture.options import CaptureOptions

    session = Session(CaptureOptions(level="L1"), None)
    session.arm()
    assert (session.step_open, session.running, session.armed) == (True, False, True)
    session.begin_recording()
    assert session.running
    session.step_end()
    assert (session.step_open, session.running, session.armed) == (False, False, False)
    session.close()
    session.begin_recording()  # a closed session never records again
    assert not session.running


def test_every_task_has_its_code_in_the_registry():
    from schemas import ANALYSIS_TASKS, TASKS

    collection = sorted(t for t in TASKS if t not in ANALYSIS_TASKS)
    assert sorted(registry.TASK_CLASSES) == collection
    assert sorted(registry.ANALYSIS_ENGINES) == sorted(ANALYSIS_TASKS)
    for task in collection:
        assert callable(registry.task_class(task)) and registry.collection_engine(task) is not None
    for task in ANALYSIS_TASKS:
        assert callable(registry.analysis_engine(task))


@pytest.mark.parametrize("framework", _frameworks())
def test_a_new_per_call_processor_plugs_into_any_framework_session(framework):
    """A task's per-call processing is a part (``engines.capture.processor``): a processor of its own, written once,
    sees every finished call of each framework's session and its lifecycle, with no subclass per framework."""
    from functools import partial

    from engines.capture.options import CaptureOptions
    from engines.capture.processor import CallProcessor
    from engines.frameworks import adapter_module

    class Names(CallProcessor):
        def __init__(self):
            self.done, self.flushed, self.closed = [], [], False

        def record_done(self, record):
            self.done.append(self.session.buffer.rec_name[record])

        def before_flush(self):
            self.flushed.append((self.session.step, self.session.buffer.num_records))

        def before_close(self):
            self.closed = True

    adapter = partial(adapter_module, framework)
    session = adapter("session").Session(CaptureOptions(level="L1"), None, rank=0)
    names = Names()
    assert session.plug(names) is session and session.record_done == names.record_done  # bound: no extra call
    options = CaptureOptions(level="L1")
    with adapter("zero_code").ZeroCodeCapture(options, None, session=session):
        adapter("demo").train({"preset": "tiny", "steps": 2})
    assert any(n.split(".")[1] == "linear" for n in names.done), names.done[:5]
    assert [s for s, n in names.flushed if n] == [0, 1] and names.closed

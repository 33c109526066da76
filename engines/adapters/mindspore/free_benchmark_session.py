"""free_benchmark on MindSpore (``engines.free_benchmark.session``): the MindSpore capture session with
``FreeBenchmarkCall`` in place of the record builder (no preheat: the session says so)."""

from engines.adapters.mindspore.free_benchmark_backward import BackwardChecks
from engines.adapters.mindspore.free_benchmark_call import FreeBenchmarkCall
from engines.adapters.mindspore.session import MindSporeCaptureSession, detect_rank  # noqa: F401 (the engine uses it)
from engines.free_benchmark.session import FreeBenchmarkSteps


class FreeBenchmarkSession(FreeBenchmarkSteps, MindSporeCaptureSession):
    backward_class = BackwardChecks
    call_class = FreeBenchmarkCall

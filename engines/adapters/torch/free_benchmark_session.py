"""free_benchmark on PyTorch (``engines.free_benchmark.session``): the torch capture session with
``FreeBenchmarkCall`` in place of the record builder."""

from engines.adapters.torch.free_benchmark_backward import BackwardChecks
from engines.adapters.torch.free_benchmark_call import FreeBenchmarkCall
from engines.adapters.torch.session import TorchCaptureSession, detect_rank  # noqa: F401 (the engine uses it)
from engines.free_benchmark.session import FreeBenchmarkSteps


class FreeBenchmarkSession(FreeBenchmarkSteps, TorchCaptureSession):
    backward_class = BackwardChecks
    call_class = FreeBenchmarkCall

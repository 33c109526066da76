"""free_benchmark's per-call control flow is one (``engines.free_benchmark.calls``), so PyTorch and MindSpore judge
a call alike. Which threshold judges each row of a checked call (docs/FREE_BENCHMARK.md, "Consistency"; reference
§8.4): every row of a call, tensor or Python number, is judged against the threshold of the call's output dtype,
the dtype of its first output tensor; a call without an output tensor gets the default. Which calls pass through
unchecked, and why.

The calls go through each framework's real free_benchmark session (``FreeBenchmarkCall``, improve_precision): a
float16 input is raised to float32 for the re-run, and the test's callables move one output by 0.1% in that
re-run: inside float16's 1.002, outside float32's 1.0002.
"""

from functools import partial

import numpy as np
import pytest

from engines.capture.options import CaptureOptions
from engines.frameworks import adapter_module
from engines.free_benchmark.calls import SKIP_INPLACE, SKIP_INPUT, SKIP_VIEW
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.session import build_session

MOVED = 1.001  # a 0.1% move: consistent at float16's 1.002, not at float32's 1.0002


class _Torch:
    def __init__(self) -> None:
        import torch

        from engines.adapters.torch.api_capture import ApiInfo

        self.torch = torch
        self.framework = "pytorch"
        self.info = ApiInfo("Functional", "twin_outputs", True)

    def half(self) -> object:
        return self.torch.tensor([1.0, 2.0, 3.0], dtype=self.torch.float16)

    def single(self) -> object:
        return self.torch.tensor([1.0, 2.0, 3.0])

    def raised(self, x) -> bool:
        return x.dtype == self.torch.float32

    def as_float32(self, t):
        return t.float()

    def times(self, t, k: float):
        return t * k


class _MindSpore:
    def __init__(self) -> None:
        ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")
        from engines.adapters.mindspore.api_capture import ApiInfo

        self.ms = ms
        self.framework = "mindspore"
        self.info = ApiInfo("Functional", "twin_outputs")

    def half(self) -> object:
        return self.ms.Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float16))

    def single(self) -> object:
        return self.ms.Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32))

    def raised(self, x) -> bool:
        return x.dtype == self.ms.float32

    def as_float32(self, t):
        return t.astype(self.ms.float32)

    def times(self, t, k: float):
        return t * k


@pytest.fixture(params=["pytorch", pytest.param("mindspore", marks=pytest.mark.mindspore)])
def fw(request):
    return _Torch() if request.param == "pytorch" else _MindSpore()


def _checks(fw):
    return build_session(partial(adapter_module, fw.framework), CaptureOptions(level="L1"), FreeBenchmarkOptions(),
                         rank=0).api_capture


def _rows(fw, func, *args):
    checks = _checks(fw)
    checks.call(fw.info, func, args, {})
    assert checks.checked == 1, dict(checks.skipped)
    return checks.finish_step(0)


def test_a_python_number_output_takes_the_threshold_of_the_first_output_tensor(fw):
    def twin(x):
        return fw.times(x, 2.0), MOVED if fw.raised(x) else 1.0

    rows = _rows(fw, twin, fw.half())
    assert [r.output_index for r in rows] == [0, 1]
    assert [r.threshold for r in rows] == [1.002, 1.002]
    assert rows[1].dtype == "float" and rows[1].ratio == pytest.approx(MOVED)
    assert all(r.consistent for r in rows)


def test_every_output_tensor_takes_the_threshold_of_the_first(fw):
    def twin(x):
        wide = fw.as_float32(x)
        return fw.times(x, 2.0), fw.times(wide, MOVED) if fw.raised(x) else wide

    rows = _rows(fw, twin, fw.half())
    assert [r.threshold for r in rows] == [1.002, 1.002]
    assert "float32" in rows[1].dtype.lower() and rows[1].ratio == pytest.approx(MOVED, rel=1e-6)
    assert all(r.consistent for r in rows)


def test_a_call_without_an_output_tensor_takes_the_default_threshold(fw):
    def number(x):
        return MOVED if fw.raised(x) else 1.0

    rows = _rows(fw, number, fw.half())
    assert [r.threshold for r in rows] == [1.0002]
    assert not rows[0].consistent



def test_the_calls_that_pass_through_unchecked_are_counted_by_reason(fw):
    checks = _checks(fw)
    x = fw.half()
    assert checks.call(fw.info, lambda t: t, (x,), {}) is x
    assert checks.call(fw.info, lambda t, out=None: fw.times(t, 2.0), (x,), {"out": None}) is not None
    assert checks.call(fw.info, lambda t: 7, ("text",), {}) == 7
    assert checks.call(fw.info, lambda t: fw.times(t, 2.0), (fw.single(),), {}) is not None
    assert checks.checked == 0 and checks.finish_step(0) == []
    assert sorted(checks.skipped) == sorted([SKIP_VIEW, SKIP_INPLACE, SKIP_INPUT, checks.ops.skip_nothing])
    assert checks.ops.skip_nothing.startswith("skipped: improve_precision found nothing to raise")


def test_preheat_runs_where_the_framework_can_rerun_on_the_cpu(fw):
    session = build_session(partial(adapter_module, fw.framework), CaptureOptions(level="L1"),
                            FreeBenchmarkOptions(if_preheat=True), rank=0)
    preheats = session.api_capture.preheat is not None
    assert preheats == isinstance(fw, _Torch)
    notes = [n for n in session.summary.notes if "preheat" in n]
    assert notes == ([] if preheats else ["free_benchmark: preheat is not available on MindSpore (as in msprobe); "
                                          "the fixed thresholds are used"])


def test_a_call_on_a_distributed_tensor_is_not_re_run():
    """Re-running a call on a DTensor (or waiting on an AsyncCollectiveTensor again) would issue collectives on one
    rank alone: such calls pass through, counted by reason."""
    torch = pytest.importorskip("torch")
    act = pytest.importorskip("torch.distributed._functional_collectives").AsyncCollectiveTensor
    from engines.free_benchmark.calls import SKIP_SHARDED

    fw = _Torch()
    checks = _checks(fw)
    x = fw.half()  # float16: improve_precision has something to raise
    out = checks.call(fw.info, lambda t: t * 2, (act(x),), {})
    assert torch.equal(out, x * 2)
    assert checks.checked == 0 and checks.skipped[SKIP_SHARDED] == 1
    checks.call(fw.info, lambda t: t * 2, (x,), {})  # a plain tensor is still checked
    assert checks.checked == 1


@pytest.mark.parametrize("deferred", [False, True])
def test_add_noise_refusing_a_tiny_input_counts_the_call_as_skipped_and_writes_no_row(fw, deferred, monkeypatch):
    """add_noise refuses an input with max(abs(x)) < eps (msprobe's rule). PyTorch on an accelerator decides it on
    the device and reads the flag with the step's ratios (no host sync per call; ``deferred`` does so on the
    CPU): the same outcome, counted when the step ends."""
    if deferred:
        if fw.framework != "pytorch":
            pytest.skip("PyTorch defers the refusal")
        from engines.adapters.torch import free_benchmark_perturb

        monkeypatch.setattr(free_benchmark_perturb, "DEFER_REFUSAL_ON_CPU", True)
    checks = build_session(partial(adapter_module, fw.framework), CaptureOptions(level="L1"),
                           FreeBenchmarkOptions(pert_mode="add_noise"), rank=0).api_capture
    tiny = fw.times(fw.single(), 1e-9)  # below float32's eps 1e-8
    checks.call(fw.info, lambda t: fw.times(t, 2.0), (tiny,), {})
    checks.call(fw.info, lambda t: fw.times(t, 2.0), (fw.single(),), {})
    rows = checks.finish_step(0)
    assert len(rows) == 1 and rows[0].consistent
    assert dict(checks.skipped) == {"skipped: add_noise: maximum value is less than the minimum threshold": 1}
    assert checks.checked == 1 + deferred  # deferred: the refused call was re-run, its row dropped
    assert checks.refusals == [] and checks.finish_step(1) == []

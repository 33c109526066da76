"""``out=`` buffers are read after the call: torch.compile's generated code hands ops freshly allocated,
uninitialised buffers to write into (``extern_kernels.addmm(..., out=buf1)``); read before the call they show
whatever the memory held (7.9e+34, inf) as non-finite rows that differ between two identical runs."""

import glob
import math
import warnings

import pytest
import torch
from test_capture_support import Dump, assert_stats_equal, make_session

from engines.compare.engine import run_compare


def _capture(tmp_path, fn):
    s = make_session(tmp_path, level="L1")
    s.start()
    out = fn()
    s.stop()
    s.step_end()
    s.close()
    return Dump(tmp_path / "rank0"), out


def test_an_out_buffer_is_recorded_with_what_the_call_wrote(tmp_path):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    buf = torch.full((3, 5), float("nan"))  # what an uninitialised buffer may hold
    vals, idx = torch.full((4,), float("inf")), torch.zeros(4, dtype=torch.long)

    def body():
        torch.mm(a, b, out=buf)
        torch.max(b, 1, out=(vals, idx))
        return buf

    dump, out = _capture(tmp_path, body)
    mm = dump.rows("Torch.mm.0.forward")
    assert_stats_equal(mm["input.out"], a @ b)
    assert_stats_equal(mm["output.0"], a @ b)
    assert_stats_equal(mm["input.0"], a)
    top = dump.rows("Torch.max.0.forward")
    assert_stats_equal(top["input.out.0"], b.max(1).values)
    assert_stats_equal(top["input.out.1"], b.max(1).indices)
    assert torch.equal(out, a @ b)


def _inductor_works() -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2)
            return bool(torch.isfinite(f(torch.randn(4))).all())
    except Exception:
        return False


def _compiled_run(dump_path, capture):
    from probe_tui.debugger import PrecisionDebugger

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    debugger = PrecisionDebugger(task="statistics", dump_path=str(dump_path), level="L1") if capture else None
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            if debugger:
                debugger.start(model)
            opt.zero_grad()
            loss = compiled(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if debugger:
                debugger.stop()
                debugger.step()
    run = sorted(glob.glob(str(dump_path / "2*")))[-1] if capture else None
    return run, losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.slow
def test_two_identical_compiled_runs_compare_clean(tmp_path):
    if not _inductor_works():
        pytest.skip("inductor cannot compile here (no C compiler)")
    torch._dynamo.reset()
    first, losses, params = _compiled_run(tmp_path / "a", capture=True)
    torch._dynamo.reset()
    second, _, _ = _compiled_run(tmp_path / "b", capture=True)
    torch._dynamo.reset()
    _, plain_losses, plain_params = _compiled_run(tmp_path / "c", capture=False)
    assert losses == plain_losses and all(torch.equal(p, q) for p, q in zip(params, plain_params))
    out = run_compare({"compare": {"target_path": first, "golden_path": second,
                                   "output_path": str(tmp_path / "out")}}, None)
    r = out.results
    assert any(n.endswith(".input.out") for n in r["target_name"])  # inductor's extern kernels write into out=
    assert (r["verdict"] == 0).all(), r["target_name"][r["verdict"] != 0]
    for side in ("t", "g"):
        for stat in ("max", "min", "mean", "norm"):
            v = r[side + "_" + stat]
            assert all(math.isfinite(x) for x in v[~(v != v)]), (side, stat)

"""msprobe's finer in-script calls on ``PrecisionDebugger`` (PyTorch, in-process): their argument checks, the rank
``start(rank_id=...)`` writes as, ``set_init_step`` timing, custom API wrappers put back, and the msprobe-style
singleton of ``probe_tui.compat`` (docs/MSPROBE.md)."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from engines.store import DumpReader  # noqa: E402
from probe_tui.debugger import PrecisionDebugger  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _names(rank_dir: Path):
    with DumpReader(rank_dir) as dump:
        recs = dump.records()
        return [(int(s), str(n)) for s, n in zip(recs["step"], recs["name"])]


@pytest.fixture
def debugger(tmp_path: Path):
    dbg = PrecisionDebugger(task="statistics", dump_path=str(tmp_path / "dump"), level="L1")
    yield dbg
    dbg.close()


def test_start_rank_id_names_the_rank_folder(debugger):
    model = torch.nn.Linear(4, 2)
    debugger.start(model, rank_id=3)
    model(torch.ones(1, 4)).sum().backward()
    debugger.stop()
    debugger.step()
    debugger.close()
    run = Path(debugger.run_dir)
    assert not (run / "rank0").exists()
    assert (0, "Functional.linear.0.forward") in _names(run / "rank3")


@pytest.mark.parametrize("kwargs, message", [
    ({"token_range": [3, 1]}, "start <= end"),
    ({"token_range": [1]}, "two integers"),
    ({"token_range": [0, 1.5]}, "two integers"),
    ({"token_range": [0, 1], "model": None}, "needs the model"),
    ({"rank_id": -1}, "rank_id"),
    ({"rank_id": "0"}, "rank_id"),
])
def test_start_checks_its_arguments(debugger, kwargs, message):
    kwargs.setdefault("model", torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=message):
        debugger.start(**kwargs)


def test_set_init_step_must_come_before_the_loop(debugger):
    debugger.set_init_step(4)
    debugger.start()
    torch.ones(2).sum()
    with pytest.raises(ValueError, match="before the first start"):
        debugger.set_init_step(0)


def test_custom_api_wrappers_are_checked_and_put_back(debugger):
    class Ops:
        @staticmethod
        def scale(x):
            return x * 3

    ops = Ops()
    original = ops.scale
    with pytest.raises(ValueError, match="no callable 'missing'"):
        debugger.register_custom_api(ops, "missing")
    debugger.register_custom_api(ops, api="scale", api_prefix="MyOps")
    assert ops.scale is not original
    debugger.start()
    out = ops.scale(torch.ones(2))
    debugger.stop()
    debugger.step()
    assert out.tolist() == [3.0, 3.0]
    debugger.close()  # a wrapper still in place at the end is removed
    assert ops.scale is original
    names = [n for _, n in _names(Path(debugger.run_dir) / "rank0")]
    assert names == ["Torch.ones.0.forward", "MyOps.scale.0.forward"]  # the multiplication inside: not again


def test_module_dump_wants_a_module(debugger):
    with pytest.raises(ValueError, match="torch.nn.Module"):
        debugger.module_dump(object(), "x")


def test_compat_debugger_is_a_singleton_as_msprobes(tmp_path: Path):
    from probe_tui.compat.msprobe.pytorch import PrecisionDebugger as Compat

    first = Compat(task="statistics", dump_path=str(tmp_path / "d"))
    try:
        second = Compat(task="tensor", dump_path=str(tmp_path / "other"))  # msprobe: a second one changes nothing
        assert second is first and first.task == "statistics"
        assert [p.name for p in (tmp_path / "d").iterdir() if p.name != "latest"] == [Path(first.run_dir).name]
        assert not (tmp_path / "other").exists()
    finally:
        first.close()
    third = Compat(task="statistics", dump_path=str(tmp_path / "d"))  # after close: a new one
    try:
        assert third is not first
    finally:
        third.close()

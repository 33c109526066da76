"""Compare of many rank pairs on worker processes (engines/compare/pair_pool.py) and across launched processes
(torchrun: engines/compare/dist_split.py): the result files are those of one process, byte for byte."""

import threading
from pathlib import Path

import numpy as np
import pytest
from dist_support import ok, torchrun

from engines.compare.engine import run_compare, run_launched
from engines.compare.hdf5_out import read_results, read_summary
from engines.compare.options import CompareError
from engines.compare.workgroup import launched_world
from engines.events import Event
from engines.store import DumpWriter

RANKS = 4
APIS = ("Functional.linear", "Torch.matmul", "Tensor.add", "Functional.gelu")


def _write_rank(folder: Path, rank: int, noisy: bool, records: int = 60, steps: int = 1) -> None:
    names = ["{}.{}.forward".format(APIS[i % len(APIS)], i // len(APIS)) for i in range(records)]
    base = np.random.default_rng(rank).random(records * 3) * 10 + 0.1
    rng = np.random.default_rng(100 + rank)
    with DumpWriter(folder / "rank{}".format(rank), meta={"rank": rank, "world_size": RANKS,
                                                         "framework": "pytorch"}) as w:
        for step in range(steps):
            rows = w.add_records(step=step, name=names, kind=0, direction=0)
            mx = base * (1 + 1e-3 * rng.standard_normal(base.size)) if noisy else base.copy()
            if noisy and rank == 2:
                mx[30:33] *= 1.5  # one record on rank 2 far off: the first suspect
            w.add_tensors(record=np.repeat(rows, 3), step=step, slot=["input.0", "input.1", "output.0"] * records,
                          dtype="torch.float32", shape=[(4, 8)] * (3 * records), max=mx, min=-mx, mean=mx / 100,
                          norm=mx * 30, valid=15, requires_grad=0)
            w.commit_step(step)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranks")
    for rank in range(RANKS):
        _write_rank(root / "target", rank, True, steps=2)
        _write_rank(root / "golden", rank, False, steps=2)
    return root


def _compare(dumps: Path, out: Path, **extra):
    section = {"target_path": str(dumps / "target"), "golden_path": str(dumps / "golden"),
               "output_path": str(out), "formats": ["hdf5", "csv"], **extra}
    events = _Events()
    outcome = run_compare({"task": "compare", "compare": section}, events)
    return outcome, events


class _Events:
    def __init__(self):
        self.seen = []

    def emit(self, kind, **fields):
        self.seen.append(Event(kind, fields))


def _same_results(a: Path, b: Path) -> None:
    """Every table of the two result stores equal, the CSV reports byte for byte, the summaries alike."""
    for table in ("results", "divergence", "tree", "golden_only"):
        ta, tb = read_results(a, table), read_results(b, table)
        assert ta.keys() == tb.keys(), table
        for col in ta:
            assert np.array_equal(ta[col], tb[col], equal_nan=ta[col].dtype.kind == "f"), (table, col)
    csv_a, csv_b = sorted(a.glob("*.csv")), sorted(b.glob("*.csv"))
    assert len(csv_a) == len(csv_b) == 1
    assert csv_a[0].read_bytes() == csv_b[0].read_bytes()
    sa, sb = read_summary(a), read_summary(b)
    for s in (sa, sb):
        for key in ("elapsed_s", "run_dir", "files"):
            s.pop(key, None)
    assert sa == sb


def test_two_workers_write_what_one_writes(dumps, tmp_path):
    one, _ = _compare(dumps, tmp_path / "one", workers=1)
    two, events = _compare(dumps, tmp_path / "two", workers=2)
    assert one.summary["rows"] == two.summary["rows"] == RANKS * 2 * 180
    assert two.top_suspects[0]["rank"] == 2  # the injected fault leads the ranking
    _same_results(tmp_path / "one", tmp_path / "two")
    steps = [e for e in events.seen if e.kind == "step"]
    assert [e["step"] for e in steps] == list(range(RANKS * 2))  # pairs done, counted as they finish
    assert {e["total_steps"] for e in steps} == {RANKS * 2} and {e["unit"] for e in steps} == {"pair"}
    assert steps[-1]["records"] == two.summary["rows"]


def test_more_workers_than_pairs_and_chunked_writing(dumps, tmp_path, monkeypatch):
    """Written a chunk at a time (a chunk smaller than a pair): the same files with 3 workers as with 1."""
    import engines.compare.stream_out as stream_out

    monkeypatch.setattr(stream_out, "CHUNK_ROWS", 200)
    _compare(dumps, tmp_path / "one", workers=1, rank=[1, 2])
    _compare(dumps, tmp_path / "three", workers=3, rank=[1, 2], step=[1])
    _compare(dumps, tmp_path / "one_s1", workers=1, rank=[1, 2], step=[1])
    _same_results(tmp_path / "one_s1", tmp_path / "three")


def _tensor_rank(folder: Path, rank: int, noise: float) -> None:
    rng = np.random.default_rng(rank)
    with DumpWriter(folder / "rank{}".format(rank), meta={"rank": rank, "world_size": 3,
                                                         "framework": "pytorch"}) as w:
        rows = w.add_records(step=0, name=["Functional.linear.{}.forward".format(i) for i in range(4)], kind=0,
                             direction=0)
        for i, row in enumerate(rows):
            x = rng.standard_normal(64).astype(np.float32)
            if noise:
                x = x + np.float32(noise * (i + 1)) * np.random.default_rng(7 + i).standard_normal(64, np.float32)
            ref = w.put_tensor(x, "torch.float32")
            w.add_tensors(refs=[ref], record=[row], step=0, slot=["output.0"], dtype="torch.float32", shape=[(64,)],
                          max=float(x.max()), min=float(x.min()), mean=float(x.mean()),
                          norm=float(np.linalg.norm(x)), valid=15)
        w.commit_step(0)


def test_tensor_mode_on_workers_writes_what_one_process_writes(tmp_path):
    for rank in range(3):
        _tensor_rank(tmp_path / "t", rank, 1e-3)
        _tensor_rank(tmp_path / "g", rank, 0.0)
    outs = []
    for w in (1, 2):
        section = {"target_path": str(tmp_path / "t"), "golden_path": str(tmp_path / "g"), "mode": "tensor",
                   "output_path": str(tmp_path / "o{}".format(w)), "workers": w}
        outs.append(run_compare({"task": "compare", "compare": section}))
    assert outs[0].summary["rows"] == 12 and outs[0].summary["mode"] == "tensor"
    assert outs[1].summary["verdicts"] == outs[0].summary["verdicts"]
    _same_results(tmp_path / "o1", tmp_path / "o2")


def test_a_compare_keeps_one_rank_open_at_a_time(dumps, tmp_path, monkeypatch):
    """Ranks are read one after the other: the readers of the ranks done are let go, so memory does not grow
    with the rank count (64 ranks x 200k rows held every reader's caches: > 4.8 GB, benchmarks/compare_ranks.py)."""
    from engines.dumps.probe_source import ProbeSource

    real = ProbeSource.rows
    open_at_once = []

    def rows(self, rank, step):
        table = real(self, rank, step)
        open_at_once.append(len(self._readers))
        return table

    monkeypatch.setattr(ProbeSource, "rows", rows)
    out, _ = _compare(dumps, tmp_path / "out", workers=1)
    assert len(open_at_once) == 2 * RANKS * 2  # both sides, every (rank, step)
    assert max(open_at_once) == 1, open_at_once


def test_a_damaged_rank_read_by_a_worker_is_one_line_exit_2(dumps, tmp_path, capsys):
    import shutil

    from probe_tui.cli import main

    bad = tmp_path / "bad"
    shutil.copytree(dumps / "target", bad)
    for h5 in (bad / "rank3").rglob("*.h5"):
        h5.write_bytes(b"not hdf5 at all")
    code = main(["compare", str(bad), str(dumps / "golden"), "-o", str(tmp_path / "out"), "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "rank3" in err[0], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_workers_below_one_is_bad_input(dumps, tmp_path, capsys):
    from probe_tui.cli import main

    code = main(["compare", str(dumps / "target"), str(dumps / "golden"), "-o", str(tmp_path / "o"),
                 "--workers", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "workers" in err[0], err


def test_launched_world_reads_torchrun_and_srun():
    assert launched_world({}) == (0, 1)
    assert launched_world({"RANK": "1", "WORLD_SIZE": "4"}) == (1, 4)
    assert launched_world({"WORLD_SIZE": "1", "RANK": "0"}) == (0, 1)
    # an sbatch script's SLURM_NTASKS alone is no launch: only an srun step's task count is
    assert launched_world({"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}) == (0, 1)
    assert launched_world({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}) == (1, 2)
    assert launched_world({"RANK": "1", "WORLD_SIZE": "4", "PROBE_TUI_COMPARE_LAUNCH": "0"}) == (0, 1)
    with pytest.raises(CompareError, match="WORLD_SIZE"):
        launched_world({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(CompareError, match="outside"):
        launched_world({"RANK": "2", "WORLD_SIZE": "2"})


class _Hub:
    """An in-process stand-in for a launch's process group: members are threads meeting at a barrier."""

    def __init__(self, size: int):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=120)
        self.slots = [None] * size

    def exchange(self, rank, obj):
        self.slots[rank] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class _ThreadGroup:
    def __init__(self, hub: _Hub, rank: int):
        self.hub, self.rank, self.size = hub, rank, hub.size
        self.collectives = 0

    def all_gather(self, obj):
        self.collectives += 1
        return self.hub.exchange(self.rank, obj)

    def gather(self, obj):
        self.collectives += 1
        out = self.hub.exchange(self.rank, obj)
        return out if self.rank == 0 else None

    def broadcast(self, obj):
        self.collectives += 1
        return self.hub.exchange(self.rank, obj)[0]

    def close(self):
        pass


def _launch_threads(size: int, section: dict):
    """run_launched on ``size`` thread members; each member's outcome or exception, and its group."""
    hub = _Hub(size)
    groups = [_ThreadGroup(hub, r) for r in range(size)]
    got = [None] * size

    def member(r):
        try:
            got[r] = run_launched(groups[r], {"task": "compare", "compare": dict(section)})
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got[r] = exc

    threads = [threading.Thread(target=member, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not any(t.is_alive() for t in threads), "a member hangs"
    return got, groups


def test_launched_members_share_the_pairs_and_rank_0_writes_the_one_result(dumps, tmp_path):
    _compare(dumps, tmp_path / "single", workers=1)
    section = {"target_path": str(dumps / "target"), "golden_path": str(dumps / "golden"),
               "output_path": str(tmp_path / "three"), "formats": ["hdf5", "csv"]}
    got, groups = _launch_threads(3, section)
    assert [type(g).__name__ for g in got] == ["CompareOutcome"] * 3, got
    _same_results(tmp_path / "single", tmp_path / "three")
    assert [g.summary.get("pairs_compared") for g in got[1:]] == [3, 2]  # pairs 1,4,7 and 2,5 of 8
    assert {g.exit_code for g in got} == {got[0].exit_code}
    assert len({g.collectives for g in groups}) == 1  # every member met the same collectives
    assert not list(tmp_path.glob(".compare-parts-*"))


@pytest.mark.parametrize("failing", [0, 1])
def test_a_member_failing_mid_share_stops_every_member_with_its_line(dumps, tmp_path, monkeypatch, failing):
    """A pair that cannot be read on one member (rank 0 or another): every member raises that member's line,
    none hangs, nothing is written and the parts folder is gone."""
    import engines.compare.pair_pool as pair_pool

    real = pair_pool.compute_piece

    def compute(target, golden, mode, settings, n, piece):
        if piece[0] == 2 + failing and piece[1] == 1:  # rank 2 or 3, step 1: piece 4 (member 0) or 5 (member 1)
            return pair_pool.PieceResult(n, error="{}: damaged or not a dump (test)".format(piece))
        return real(target, golden, mode, settings, n, piece)

    monkeypatch.setattr(pair_pool, "compute_piece", compute)
    section = {"target_path": str(dumps / "target"), "golden_path": str(dumps / "golden"),
               "output_path": str(tmp_path / "out")}
    got, groups = _launch_threads(2, section)
    assert all(isinstance(g, CompareError) for g in got), got
    assert [getattr(g, "echoed", False) for g in got] == [False, True]  # rank 0 prints the line
    assert {str(g) for g in got} == {"({}, 1, 1): damaged or not a dump (test)".format(2 + failing)}
    assert len({g.collectives for g in groups}) == 1
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".compare-parts-*"))


def test_a_member_that_cannot_open_a_dump_stops_every_member(dumps, tmp_path, monkeypatch):
    import engines.compare.engine as engine

    real = engine.open_side
    calls = []

    def open_side(path, field_name):
        calls.append(threading.current_thread().name)
        if field_name == "compare.golden_path" and len(calls) > 2:  # the second member's golden side
            raise CompareError("compare.golden_path: {}: not readable here (test)".format(path))
        return real(path, field_name)

    monkeypatch.setattr(engine, "open_side", open_side)
    section = {"target_path": str(dumps / "target"), "golden_path": str(dumps / "golden"),
               "output_path": str(tmp_path / "out")}
    got, groups = _launch_threads(2, section)
    assert all(isinstance(g, CompareError) and "not readable here" in str(g) for g in got), got
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_torchrun_two_processes_write_what_one_process_writes(dumps, tmp_path):
    """``torchrun --nproc_per_node=2 -m probe_tui compare``: each process takes half the pairs, rank 0 writes."""
    run_compare({"task": "compare", "compare": {"target_path": str(dumps / "target"),
                                                "golden_path": str(dumps / "golden"),
                                                "output_path": str(tmp_path / "single")}})
    proc = ok(torchrun(tmp_path, ["-m", "probe_tui", "compare", str(dumps / "target"), str(dumps / "golden"),
                                  "-o", str(tmp_path / "launched"), "--json"], nproc=2, timeout=240))
    _same_results(tmp_path / "single", tmp_path / "launched")
    out = proc.stdout.decode()
    assert out.count('"launched_rank": 1') == 1 and out.count('"rows": {}'.format(RANKS * 2 * 180)) == 1, out
    assert not list(tmp_path.glob(".compare-parts-*"))  # the parts folder is gone


@pytest.mark.slow
def test_torchrun_bad_input_stops_every_process_with_one_line(dumps, tmp_path):
    """Rank 0 says the one line, every process exits 2 (torchrun then prints its own report of failed children)."""
    proc = torchrun(tmp_path, ["-m", "probe_tui", "compare", str(dumps / "target"), str(tmp_path / "nowhere"),
                               "-o", str(tmp_path / "out")], nproc=2, timeout=240)
    err = proc.stderr.decode()
    assert proc.returncode != 0
    lines = [x for x in err.splitlines() if "nowhere" in x]
    assert len(lines) == 1 and lines[0].startswith("probe-tui: error: compare: compare.golden_path"), err
    assert "exitcode  : 2" in err and "local_rank: 0" in err, err  # rank 0 exits first (then torchrun stops 1)
    assert "/engines/" not in err and "/probe_tui/" not in err  # no traceback of ours
    assert not (tmp_path / "out").exists()



def test_the_cli_progress_counts_pairs():
    import io

    from rich.console import Console

    from probe_tui.progress import RichProgressSink

    buf = io.StringIO()
    sink = RichProgressSink(Console(file=buf, force_terminal=False, width=200), plain_interval_s=0)
    sink.emit("run_started", run_dir=None, task="compare", total_steps=None)
    for n in range(3):
        sink.emit("step", step=n, total_steps=3, elapsed_s=0.5, records=10 * (n + 1), unit="pair")
    assert [x.split()[0:2] for x in buf.getvalue().splitlines()[1:]] == [["1/3", "pairs"], ["2/3", "pairs"],
                                                                         ["3/3", "pairs"]]

"""Multi-process launches: every rank of one launch writes into ONE run folder (torchrun for real, on CPU with
gloo), the ranks agree on the run-id through the launcher's store, and PROBE_TUI_RANKS limits the writing ranks."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from test_capture_support import TINY, Dump

from engines import launch
from engines.run_list import list_runs
from engines.runs import create_run

ROOT = Path(__file__).resolve().parents[1]

DDP_SCRIPT = textwrap.dedent('''
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        torch.manual_seed(rank)
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
''')

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_STEP_ID",
                "SLURM_NTASKS", "PROBE_TUI_RUN_ID", "PROBE_TUI_RANKS", "GROUP_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture
def no_launcher(monkeypatch):
    """A clean launcher environment (the suite may itself run under one)."""
    for name in _LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(launch, "_runs_made", 0)
    return monkeypatch


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_torchrun_ranks_write_one_run_folder(tmp_path):
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    (tmp_path / "cfg.json").write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": "dump",
                                                   "target": {"script": "train.py"}}))
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    # 'run CONFIG' is '--run CONFIG' in a form torchrun does not take for a prefix of its own --run-path
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=%d" % _free_port(),
           "-m", "probe_tui", "run", "cfg.json"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    runs = list_runs(tmp_path / "dump")
    assert len(runs) == 1, [r.path for r in runs]
    run = runs[0]
    assert run.ranks == [0, 1] and run.status == "finished"
    assert sorted(p.name for p in run.path.iterdir()) == ["rank0", "rank1", "run.json"]
    meta = json.loads((run.path / "run.json").read_text())
    assert meta["ranks"] == [0, 1] and meta["exit_code"] == 0
    for rank in (0, 1):
        dump = Dump(run.path / ("rank%d" % rank))
        names = dump.names(0)
        assert dump.steps() == [0, 1] and dump.reader.meta["rank"] == rank
        # DDP's "module." prefix is stripped so that ranks and single-device runs share names
        assert "Module.0.Linear.forward.0" in names and "Functional.linear.0.forward" in names
        assert "Module.0.Linear.parameters_grad.0" in names and "Distributed.all_reduce.0.forward" not in names
    assert (tmp_path / "dump" / "latest").resolve() == run.path.resolve()


@pytest.fixture
def agent_store(no_launcher):
    """What torchrun gives its workers: a TCPStore at MASTER_ADDR:MASTER_PORT and the variables that say so."""
    from torch.distributed import TCPStore

    port = _free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=30), wait_for_workers=False)
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("WORLD_SIZE", "2"),
                        ("TORCHELASTIC_USE_AGENT_STORE", "True"), ("TORCHELASTIC_RUN_ID", "none"),
                        ("TORCHELASTIC_RESTART_COUNT", "0")):
        no_launcher.setenv(name, value)
    yield no_launcher
    del store


def _as_rank(monkeypatch, rank):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setattr(launch, "_runs_made", 0)  # a fresh process


def test_ranks_agree_through_the_launcher_store_and_restarts_get_new_runs(tmp_path, agent_store):
    _as_rank(agent_store, 1)
    first = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    _as_rank(agent_store, 0)
    second = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert first.path == second.path and first.owner and not second.owner
    assert first.run_id[:8].isdigit()  # a fresh YYYYmmdd-HHMMSS-<hex> id: the first proposal won
    # the process's second run is another run, on every rank
    again = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert again.path != first.path and again.owner
    # an elastic restart is a new attempt: a new run
    agent_store.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    _as_rank(agent_store, 0)
    restarted = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert restarted.path not in (first.path, again.path)
    # comparisons are one process's result and never join
    cmp = create_run(tmp_path, task="compare", config={}, framework="none")
    assert cmp.owner and cmp.path not in (first.path, restarted.path)


def test_the_in_script_debugger_joins_the_launch_run(tmp_path, agent_store):
    import torch

    from probe_tui import PrecisionDebugger

    _as_rank(agent_store, 0)
    other = create_run(tmp_path, task="statistics", config={}, framework="pytorch")  # rank 0 arrived first
    _as_rank(agent_store, 1)
    debugger = PrecisionDebugger(task="statistics", dump_path=str(tmp_path), level="L1")
    try:
        assert debugger.run_dir == other.path and not debugger.run.owner
        model = torch.nn.Linear(2, 2)
        debugger.start(model)
        model(torch.ones(1, 2)).sum().backward()
        debugger.stop()
        debugger.step()
    finally:
        debugger.close()
    assert (other.path / "rank1").is_dir()
    assert json.loads((other.path / "run.json").read_text())["status"] == "running"  # the owner finishes it
    debugger.run.finish("failed", 1, {})  # any caller in a rank that joined: run.json has one writer
    assert json.loads((other.path / "run.json").read_text())["status"] == "running"
    other.finish("finished", 0, {})


def test_without_a_shared_store_ids_come_from_the_launch_or_each_rank_picks_its_own(tmp_path, no_launcher):
    no_launcher.setenv("WORLD_SIZE", "2")
    no_launcher.setenv("SLURM_JOB_ID", "4242")
    no_launcher.setenv("SLURM_STEP_ID", "3")
    a = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    no_launcher.setattr(launch, "_runs_made", 0)
    b = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert a.run_id == b.run_id == "slurm-4242-3" and a.owner and not b.owner
    no_launcher.delenv("SLURM_JOB_ID")
    no_launcher.setenv("TORCHELASTIC_RUN_ID", "job/7")
    no_launcher.setattr(launch, "_runs_made", 0)
    assert create_run(tmp_path, task="statistics", config={}, framework="pytorch").run_id == "torchrun-job_7-r0"
    no_launcher.delenv("TORCHELASTIC_RUN_ID")
    c = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    d = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert c.path != d.path and c.owner and d.owner
    no_launcher.setenv("PROBE_TUI_RUN_ID", "mine")
    assert create_run(tmp_path, task="statistics", config={}, framework="pytorch").run_id == "mine"


def _run_demo_as_rank(tmp_path, monkeypatch, rank, ranks_env, config_rank=()):
    from engines.runner import run_job
    from schemas import load_config

    monkeypatch.setenv("RANK", str(rank))
    if ranks_env is not None:
        monkeypatch.setenv("PROBE_TUI_RANKS", ranks_env)
    job = load_config({"task": "statistics", "level": "L0", "dump_path": str(tmp_path), "rank": list(config_rank),
                       "target": {"demo": dict(TINY, steps=1)}})
    return run_job(job)


def test_probe_tui_ranks_limits_the_writing_ranks(tmp_path, no_launcher):
    out = _run_demo_as_rank(tmp_path / "a", no_launcher, 1, "0,2-3")
    assert out.exit_code == 0 and not list(Path(out.run_dir).glob("rank*"))  # rank 1 is not listed
    assert json.loads((Path(out.run_dir) / "run.json").read_text())["config"]["rank"] == [0, 2, 3]
    out = _run_demo_as_rank(tmp_path / "b", no_launcher, 2, '[0, "2-3"]')
    assert [p.name for p in Path(out.run_dir).glob("rank*")] == ["rank2"]
    # the config's own rank list wins
    out = _run_demo_as_rank(tmp_path / "c", no_launcher, 1, "0", config_rank=[1])
    assert [p.name for p in Path(out.run_dir).glob("rank*")] == ["rank1"]


@pytest.mark.parametrize("bad", ["1-0", "x", "[0, true]", "[1"])
def test_a_bad_probe_tui_ranks_is_a_one_line_error(tmp_path, no_launcher, bad):
    from engines.runner import JobError

    with pytest.raises(JobError, match="^PROBE_TUI_RANKS: ") as err:
        _run_demo_as_rank(tmp_path, no_launcher, 0, bad)
    assert "\n" not in str(err.value)
    assert not (tmp_path.exists() and any(tmp_path.iterdir()))  # nothing half-written

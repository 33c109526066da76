"""One run per launch, counted and summarised as one: every rank's rank.json, the owner's totals in run.json
(bounded wait, a rank that never finishes reported, never waited on for ever), readers that recompute, one CLI
summary per launch, and merge-runs for node-local copies (docs/FORMAT.md "Ranks of one launch")."""

import json
import os
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path

import pytest
from dist_support import LAUNCH_VARS, bed, clean_env, free_port, ok, torchrun

from engines import launch, run_ranks
from engines.run_list import list_runs
from engines.runs import create_run
from engines.store import DumpReader


@pytest.fixture
def launch_env(monkeypatch):
    """Rank ``RANK`` of a 2-process launch sharing the run-id ``RID`` (no torchrun needed)."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(launch, "_runs_made", 0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("PROBE_TUI_RUN_ID", "RID")
    return monkeypatch


def _join(tmp_path, monkeypatch, rank):
    monkeypatch.setenv("RANK", str(rank))
    run = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    return run, run_ranks.RankLifecycle(run)


def _summary(records):
    return {"records": records, "tensor_rows": 2 * records, "size_bytes": 100 * records}


def test_the_owner_waits_for_a_rank_that_finishes_later_and_totals_both(tmp_path, launch_env):
    owner, mine = _join(tmp_path, launch_env, 0)
    other, theirs = _join(tmp_path, launch_env, 1)
    assert owner.owner and other.joined
    assert run_ranks.read_rank(owner.path, 1)["status"] == "running"  # registered when it joined
    mine.end("finished", 0, _summary(3), steps=2)
    timer = threading.Timer(0.3, lambda: theirs.end("finished", 0, _summary(5), steps=2))
    timer.start()
    fields = mine.settle(30.0)
    timer.join()
    assert fields["per_rank"]["1"]["records"] == 5 and fields["per_rank"]["0"]["records"] == 3
    assert fields["totals"] == {"ranks": 2, "finished": 2, "records": 8, "tensor_rows": 16, "bytes": 800,
                                "steps": 2}
    assert fields["world_size"] == 2 and fields["steps"] == 2


def test_a_rank_that_never_finishes_is_reported_not_waited_on(tmp_path, launch_env):
    owner, mine = _join(tmp_path, launch_env, 0)
    _join(tmp_path, launch_env, 1)  # registered, alive (this very process), never ends
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _join(tmp_path, launch_env, 2)  # registered, then its process died without a word
    path = owner.path / "rank2" / "rank.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps(dict(data, pid=int(dead.stdout), proc_start=None)))
    mine.end("finished", 0, _summary(3), steps=1)
    started = time.monotonic()
    fields = mine.settle(0.5)
    assert time.monotonic() - started < 20  # bounded (a generous bound: the wait itself is 0.5 s)
    assert fields["per_rank"]["1"]["status"] == "unknown" and fields["per_rank"]["1"]["records"] is None
    assert fields["per_rank"]["2"]["status"] == "crashed"
    assert fields["totals"]["records"] == 3 and fields["totals"]["finished"] == 1
    owner.finish("finished", 0, {}, **fields)
    # the run list recomputes: rank 1 finishing after run.json was written is counted there
    launch_env.setenv("RANK", "1")
    run_ranks.finish_rank(owner, 1, "finished", 0, {"records": 4, "tensor_rows": 8, "bytes": 400, "steps": 1})
    info = list_runs(tmp_path)[0]
    assert info.per_rank["1"]["status"] == "finished" and info.totals["records"] == 7
    assert json.loads((owner.path / "run.json").read_text())["totals"]["records"] == 3  # run.json as written


def test_the_rank_comes_from_whichever_launcher_started_the_process(tmp_path, launch_env):
    from probe_tui.launch_view import progress_choice

    launch_env.delenv("WORLD_SIZE")
    for name in ("SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK_ID"):
        launch_env.delenv(name, raising=False)
    launch_env.setenv("SLURM_NTASKS", "4")
    launch_env.setenv("SLURM_PROCID", "3")
    launch_env.setenv("SLURM_LOCALID", "1")
    run = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    lifecycle = run_ranks.RankLifecycle(run)
    assert lifecycle.rank == 3 and lifecycle.world_size == 4
    assert [p.name for p in run.path.glob("rank*")] == ["rank3"]  # not every process's "rank0"
    assert progress_choice() == ("rank 3", False)  # local rank 1 draws no progress
    launch_env.delenv("SLURM_PROCID")  # a launch that names no rank: nothing registered under a guessed one
    assert run_ranks.RankLifecycle(run).rank is None and [p.name for p in run.path.glob("rank*")] == ["rank3"]


def test_a_single_process_run_counts_its_one_rank(tmp_path, launch_env):
    from test_capture_support import TINY

    from engines.runner import run_job
    from schemas import load_config

    launch_env.delenv("WORLD_SIZE")
    launch_env.delenv("PROBE_TUI_RUN_ID")
    out = run_job(load_config({"task": "statistics", "level": "L0", "dump_path": str(tmp_path),
                               "target": {"demo": dict(TINY, steps=2)}}))
    meta = json.loads((Path(out.run_dir) / "run.json").read_text())
    reader = DumpReader(Path(out.run_dir) / "rank0")
    assert meta["per_rank"]["0"]["records"] == reader.records(columns=["step"])["row"].size == out.summary["records"]
    assert meta["totals"]["records"] == out.summary["records"] and meta["steps"] == 2 and out.launch is None


def test_only_the_chosen_rank_draws_progress_and_every_line_names_its_rank():
    from rich.console import Console

    from probe_tui.progress import RichProgressSink

    def lines(**kwargs):
        buf = StringIO()
        sink = RichProgressSink(Console(file=buf, width=200), plain_interval_s=0, **kwargs)
        sink.emit("run_started", run_dir="d", task="statistics", total_steps=2)
        sink.emit("step", step=0, total_steps=2, elapsed_s=0.1, records=3)
        sink.emit("message", level="warning", text="careful")
        sink.emit("run_finished", status="finished", exit_code=0, run_dir="d", summary={})
        return buf.getvalue().splitlines()

    shown = lines(rank_label="rank 0")
    assert shown and all(line.startswith("[rank 0] ") for line in shown) and len(shown) == 4
    assert lines(rank_label="rank 1", progress=False) == ["[rank 1] warning: careful"]


# -- merge-runs -------------------------------------------------------------------------------------------------

def _node_copy(root, rank, records, run_id="RID", status="finished"):
    """What one node's dump_path holds after a launch: run.json and its own rank folder."""
    run = root / run_id
    (run / ("rank%d" % rank)).mkdir(parents=True)
    (run / ("rank%d" % rank) / "dump.h5").write_bytes(b"rank%d" % rank)
    (run / ("rank%d" % rank) / "rank.json").write_text(json.dumps(
        {"rank": rank, "status": status, "exit_code": 0, "records": records, "tensor_rows": records,
         "bytes": 10, "steps": 2}))
    (run / "run.json").write_text(json.dumps({"run_id": run_id, "status": status, "exit_code": 0, "task":
                                              "statistics", "world_size": 2, "ranks": [rank]}))
    return run


def _merge(*argv):
    return subprocess.run([sys.executable, "-m", "probe_tui", "merge-runs", *argv], capture_output=True, text=True,
                          env=clean_env(), timeout=120)


def test_merge_runs_refuses_what_is_not_one_launch_in_one_line_and_writes_nothing(tmp_path):
    a = _node_copy(tmp_path / "n0", 0, 3)
    b = _node_copy(tmp_path / "n1", 1, 4)
    other = _node_copy(tmp_path / "n2", 1, 4, run_id="OTHER")
    clash = _node_copy(tmp_path / "n3", 1, 5)
    (clash / "rank1" / "dump.h5").write_bytes(b"not the same")
    running = _node_copy(tmp_path / "n4", 1, 4)
    (running / "run.json").write_text(json.dumps({"run_id": "RID", "status": "running"}))
    (tmp_path / "taken").mkdir()
    linked = _node_copy(tmp_path / "n6", 1, 4)
    (linked / "rank1" / "elsewhere").symlink_to(tmp_path / "n0")
    cases = [((str(tmp_path / "out"), str(a), str(other)), "differs from"),
             ((str(tmp_path / "out"), str(a), str(b), str(clash)), "rank1: in both"),
             ((str(tmp_path / "out"), str(a), str(running)), "still running"),
             ((str(tmp_path / "taken"), str(a), str(b)), "already exists"),
             ((str(tmp_path / "out"), str(a), str(tmp_path / "nowhere")), "no such file"),
             ((str(tmp_path / "none" / "out"), str(a), str(b)), "does not exist"),
             ((str(tmp_path / "out"), str(a), str(linked)), "is a link")]  # found while copying: all undone
    for argv, words in cases:
        proc = _merge(*argv)
        assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n0", "n1", "n2", "n3", "n4", "n6", "taken"]
    assert not list((tmp_path / "taken").iterdir())
    # the same rank in two copies with the same files is one rank
    same = _node_copy(tmp_path / "n5", 1, 4)
    ok = _merge(str(tmp_path / "out"), str(a), str(b), str(same), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["totals"]["records"] == 7


@pytest.mark.slow
def test_a_two_process_launch_counts_both_ranks_and_prints_one_summary(tmp_path):
    (tmp_path / "cfg.json").write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": "dump",
                                                   "target": {"script": bed("tp")}}))
    proc = ok(torchrun(tmp_path, ["-m", "probe_tui", "run", "cfg.json", "--json"], nproc=2, timeout=240))
    out, err = proc.stdout.decode(), proc.stderr.decode()
    payload = json.loads(out)  # one JSON object on stdout for the launch, not one per rank
    run = list_runs(tmp_path / "dump")
    assert len(run) == 1
    meta = json.loads((run[0].path / "run.json").read_text())
    counts = {}
    for rank in (0, 1):
        reader = DumpReader(run[0].path / ("rank%d" % rank))
        counts[rank] = (reader.records(columns=["step"])["row"].size, reader.tensors(columns=["step"])["row"].size)
        entry = meta["per_rank"][str(rank)]
        assert (entry["records"], entry["tensor_rows"]) == counts[rank] and entry["status"] == "finished"
        assert entry["steps"] == 2 and counts[rank][0] > 0
    assert meta["totals"]["records"] == sum(c[0] for c in counts.values())
    assert meta["totals"]["tensor_rows"] == sum(c[1] for c in counts.values())
    assert meta["totals"]["bytes"] == sum(meta["per_rank"][r]["bytes"] for r in "01") and meta["world_size"] == 2
    assert payload["totals"] == meta["totals"] and sorted(payload["ranks"]) == ["0", "1"]
    # one summary (its per-rank table once), progress from local rank 0 only, each line with its rank
    assert err.count("tensor rows") == 2, err  # the totals line and the per-rank table's header
    assert err.count("2 ranks, 2 finished") == 1
    assert "[rank 0] " in err and "[rank 1] " not in err


def _node(cwd: Path, node: int, port: int) -> "subprocess.Popen[bytes]":
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--node_rank=%d" % node,
           "--nproc_per_node=1", "--master_addr=127.0.0.1", "--master_port=%d" % port,
           "-m", "probe_tui", "run", "cfg.json"]
    return subprocess.Popen(cmd, cwd=cwd, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


@pytest.mark.slow
def test_two_simulated_nodes_with_node_local_dump_paths_merge_into_one_run(tmp_path):
    cfg = json.dumps({"task": "statistics", "level": "L1", "dump_path": "dump", "target": {"script": bed("tp")}})
    port = free_port()
    nodes = []
    for node in (0, 1):
        (tmp_path / ("node%d" % node)).mkdir()
        (tmp_path / ("node%d" % node) / "cfg.json").write_text(cfg)
        nodes.append(_node(tmp_path / ("node%d" % node), node, port))
    try:
        for proc in nodes:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err.decode()[-3000:]
    finally:
        for proc in nodes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    copies = [list_runs(tmp_path / ("node%d" % node) / "dump") for node in (0, 1)]
    assert [len(c) for c in copies] == [1, 1] and copies[0][0].run_id == copies[1][0].run_id
    assert [c[0].ranks for c in copies] == [[0], [1]] and all(c[0].world_size == 2 for c in copies)
    merged = tmp_path / "merged"
    proc = _merge(str(merged), str(tmp_path / "node0" / "dump"), str(tmp_path / "node1" / "dump"))
    assert proc.returncode == 0, proc.stderr
    assert "merged 2 rank(s)" in proc.stdout
    meta = json.loads((merged / "run.json").read_text())
    assert meta["ranks"] == [0, 1] and meta["status"] == "finished" and meta["run_id"] == copies[0][0].run_id
    records = [DumpReader(merged / ("rank%d" % r)).records(columns=["step"])["row"].size for r in (0, 1)]
    assert meta["totals"]["records"] == sum(records) == sum(c[0].totals["records"] for c in copies)
    assert [meta["per_rank"][r]["records"] for r in "01"] == records and meta["totals"]["finished"] == 2
    info = list_runs(merged)[0]
    assert info.ranks == [0, 1] and info.totals == meta["totals"]
    assert os.path.isfile(merged / "rank1" / "segments.jsonl")

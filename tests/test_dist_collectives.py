"""Collectives as records (``args["collective"]``) and the first NaN of a multi-rank run found across ranks by
following the collective links, on real torchrun launches (gloo, CPU), plus the analysis on synthetic stores."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from dist_support import bed, losses, ok, run_single, torchrun  # noqa: F401

from engines.events import NullSink
from engines.overflow import origin as og
from engines.overflow.cross_rank import cross_rank_origin, read_ranks
from engines.parse.collectives import find_mismatches
from engines.runner import run_job
from engines.runs import open_run
from engines.store import DumpReader, open_rank_dirs
from probe_tui.cli import main
from schemas import load_config


def _job(folder: Path, task: str, name: str, level: str = "L1") -> None:
    (folder / "cfg.json").write_text(json.dumps({"task": task, "dump_path": "dump", "level": level,
                                                 "target": {"script": bed(name)}}))


def _parse_collectives(path: Path, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["parse", str(path), "--collectives", "--json"] + list(extra)) == 0
    return json.loads(capsys.readouterr().out)


# -- records of known collectives (2 ranks) ----------------------------------------------------------------------
@pytest.mark.slow
def test_collective_records_pair_across_ranks_and_leave_losses_bit_identical(tmp_path, capsys):
    plain, probed = tmp_path / "plain", tmp_path / "probed"
    plain.mkdir()
    probed.mkdir()
    _job(probed, "statistics", "collectives")
    with ThreadPoolExecutor(2) as pool:  # the two launches side by side
        runs = [pool.submit(torchrun, plain, [bed("collectives")], nproc=2, timeout=240),
                pool.submit(torchrun, probed, ["-m", "probe_tui", "run", "cfg.json"], nproc=2, timeout=240)]
        for run in runs:
            ok(run.result())
    assert losses(probed) == losses(plain)  # exact floats: capture changed nothing
    assert len(losses(plain)) == 2

    found = _parse_collectives(probed / "dump" / "latest", capsys, "--step", "0")
    assert found["mismatches"] == []
    by_rank = {r: [c for c in found["collectives"] if c["rank"] == r] for r in (0, 1)}
    want = [("all_reduce", "sum", "torch.float32", 256), ("all_reduce", "sum", "torch.float32", 32),
            ("all_reduce", "sum", "torch.bfloat16", 128), (None, None, "torch.float32", 32),
            ("broadcast", None, "torch.float32", 8), ("all_reduce", "max", "torch.float32", 4),
            (None, None, "torch.float64", 24), ("all_reduce", "sum", "torch.float32", 32)]
    for rank, calls in by_rank.items():
        got = [(c["op"], c["reduce_op"], c["dtype"], c["bytes"]) for c in calls]
        assert len(got) == len(want), got
        for (op, red, dtype, nbytes), (wop, wred, wdtype, wbytes) in zip(got, want):
            assert (red, dtype, nbytes) == (wred, wdtype, wbytes)
            assert wop is None or op == wop
        assert calls[3]["op"] in ("all_gather_into_tensor", "all_gather_single")
        assert calls[6]["op"] == ("send" if rank == 0 else "recv")
        assert all(c["group"] == [0, 1] for c in calls)
        world = [c for c in calls if c["group_name"] == calls[0]["group_name"]]
        assert [c["group_seq"] for c in world] == list(range(7))  # counted per group ...
        pair = [c for c in calls if c["group_name"] != calls[0]["group_name"]]
        assert [(c["op"], c["group_seq"]) for c in pair] == [("all_reduce", 0)]  # ... each group on its own
        assert calls[4]["src"] == 1 and calls[7]["async_op"] is True and calls[0]["async_op"] is False
    send, recv = by_rank[0][6], by_rank[1][6]
    assert (send["dst"], send["src"], recv["src"], recv["dst"]) == (1, None, 0, None)
    # the same collective on both ranks: same group_seq, op and dtype
    links = {(c["group_name"], c["group_seq"]): c for c in by_rank[0]}
    for c in by_rank[1]:
        twin = links[(c["group_name"], c["group_seq"])]
        assert (twin["dtype"], twin["bytes"]) == (c["dtype"], c["bytes"])

    # step 1 goes on counting: group_seq is per run, not per step
    later = _parse_collectives(probed / "dump" / "latest", capsys, "--step", "1", "--rank", "0")["collectives"]
    assert later[0]["group_seq"] == 7

    # the functional all-reduce is recorded as its (waited) result: one output row, the sum over both ranks
    reader = DumpReader(open_rank_dirs(open_run(probed / "dump" / "latest").path)[0])
    try:
        rows = reader.tensors(0, ["record", "slot"])
        recs = reader.records(0, ["name"])
        record = [int(r) for r, n in zip(recs["row"], recs["name"]) if n == "Distributed.all_reduce.4.forward"][0]
        slots = sorted(s for r, s in zip(rows["record"], rows["slot"]) if int(r) == record)
        assert slots == ["input.0", "output.0"]  # the op and group name are arguments, not tensors
    finally:
        reader.close()


# -- the first NaN across 4 ranks ------------------------------------------------------------------------------
@pytest.mark.slow
def test_nan_made_on_rank_2_before_an_all_reduce_is_traced_to_rank_2(tmp_path):
    _job(tmp_path, "overflow_check", "nan_allreduce")
    proc = ok(torchrun(tmp_path, ["-m", "probe_tui", "run", "cfg.json"], nproc=4, timeout=280))
    out = proc.stdout.decode() + proc.stderr.decode()  # the summary goes where the launcher's output goes
    assert "first non-finite value across 4 ranks: rank 2, Torch.log.0.forward at step 0" in out
    run = open_run(tmp_path / "dump" / "latest")
    calls = read_ranks(open_rank_dirs(run.path))
    assert sorted(calls) == [0, 1, 2, 3]
    for rank in (0, 1, 3):  # every other rank got the NaN from the all-reduce of the gradients
        first = calls[rank][0]
        assert (first["name"], first["origin"]) == ("Distributed.all_reduce.0.forward", "received")
        assert first["collective"]["group"] == [0, 1, 2, 3]
    found = cross_rank_origin(calls)
    assert (found["rank"], found["name"], found["origin"]) == (2, "Torch.log.0.forward", "produced")
    assert [o["rank"] for o in found["origins"]] == [2]
    assert "from rank 2" in found["chain"][0]

    # analyze_overflow on the same run: the received all-reduces are inherited, the origin is rank 2's log
    job = load_config({"task": "analyze_overflow", "dump_path": str(tmp_path / "analysis"),
                       "analyze_overflow": {"path": str(run.path)}})
    outcome = run_job(job, events=NullSink())
    assert outcome.summary["cross_rank_origin"]["rank"] == 2
    assert outcome.summary["verdict"].startswith("first non-finite value across 4 ranks: rank 2, Torch.log.0.forward")
    categories = {(r["rank"], r["name"]): r["category"] for r in outcome.summary["replays"]}
    assert categories[(0, "Distributed.all_reduce.0.forward")] == "inherited"
    assert categories[(2, "Torch.log.0.forward")] == "range"


# -- the analysis on synthetic stores --------------------------------------------------------------------------
def _coll(seq: int, group=(0, 1, 2, 3), op: str = "all_reduce") -> dict:
    return {"op": op, "group": list(group), "src": None, "dst": None, "reduce_op": "sum", "dtype": "torch.float32",
            "bytes": 64, "async_op": False, "group_seq": seq, "group_name": "0"}


def _call(name: str, origin: str, clock: dict, coll=None, step: int = 0, order: int = 0) -> dict:
    return {"step": step, "order": order, "name": name, "origin": origin, "reason": origin, "where": "",
            "collective": coll, "clock": clock}


def test_origin_follows_the_collective_link_not_the_lowest_rank():
    # rank 1 made its own NaN only after all-reduce #3 (it already held rank 3's); rank 3 made one before #3
    calls = {
        0: [_call("Distributed.all_reduce.3.forward", "received", {"0": 4}, _coll(3))],
        1: [_call("Torch.exp.0.forward", "produced", {"0": 4})],
        2: [_call("Distributed.all_reduce.3.forward", "received", {"0": 4}, _coll(3))],
        3: [_call("Torch.log.2.forward", "produced", {"0": 3})],
    }
    found = cross_rank_origin(calls)
    assert (found["rank"], found["name"]) == (3, "Torch.log.2.forward")
    assert [o["rank"] for o in found["origins"]] == [3, 1]  # happens-before: #3 lies between them
    assert "from rank 3" in found["chain"][0]


def test_origin_follows_a_chain_of_collectives_back():
    # rank 1 got it from rank 3 on a pair group; rank 0 got it from rank 1 on the world group later
    pair = {"op": "all_reduce", "group": [1, 3], "group_seq": 0, "group_name": "7"}
    calls = {
        0: [_call("Distributed.all_reduce.5.forward", "received", {"0": 6}, _coll(5))],
        1: [_call("Distributed.all_reduce.0.forward", "received", {"0": 5, "7": 1}, pair)],
        3: [_call("Torch.div.0.forward", "produced", {"0": 5})],
    }
    found = cross_rank_origin(calls)
    assert (found["rank"], found["name"]) == (3, "Torch.div.0.forward")
    assert "from rank 3" in found["chain"][0] and "from rank 3" in found["chain"][1]


def test_a_member_that_went_bad_after_the_collective_is_no_source():
    calls = {
        0: [_call("Distributed.all_reduce.1.forward", "received", {"0": 2}, _coll(1))],
        1: [_call("Torch.log.0.forward", "produced", {"0": 2})],  # after collective #1: not the source
    }
    found = cross_rank_origin(calls)
    assert "an unrecorded rank" in found["chain"][0]
    assert cross_rank_origin({}) is None
    old = {0: [_call("Distributed.all_reduce.1.forward", "received", None, _coll(1))],
           1: [_call("Torch.log.0.forward", "produced", None)]}  # stores without clocks: no link claimed
    assert "an unrecorded rank" in cross_rank_origin(old)["chain"][0]


def test_a_collective_whose_output_alone_is_bad_received_its_values():
    facts_in = [og.TensorFacts("input.0", 0)]
    facts_out = [og.TensorFacts("output.0", og.NAN)]
    verdict = og.received(og.classify(facts_in, facts_out), _coll(2))
    assert (verdict.name, verdict.flagged) == ("received", True)
    assert "all_reduce #2" in verdict.reason
    assert og.received(og.classify(facts_in, facts_out), None).name == "produced"


def test_mismatched_collectives_are_listed():
    rows = [dict(_coll(0), rank=0), dict(_coll(0), rank=1, dtype="torch.bfloat16"),
            dict(_coll(1, op="send"), rank=0), dict(_coll(1, op="recv"), rank=1)]
    mismatches = find_mismatches(rows)
    assert [(m["group_seq"], m["ranks"]) for m in mismatches] == [(0, [0, 1])]
    assert "rank 1 bfloat16" in mismatches[0]["text"]


# -- the tracker in one process (a 1-rank gloo group) ----------------------------------------------------------
def test_one_process_collectives_are_described_and_counted_per_group(tmp_path, monkeypatch):
    import torch
    import torch.distributed as dist
    from dist_support import free_port
    from test_capture_support import Dump, make_session

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        solo = dist.new_group([0])
        half = torch.ones(4, dtype=torch.bfloat16)
        t = torch.arange(4, dtype=torch.float32)
        s = make_session(tmp_path, level="L1")
        s.start()
        dist.all_reduce(half)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=solo)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        y = torch.ops._c10d_functional.all_reduce(t, "avg", solo.group_name)
        torch.ops._c10d_functional.wait_tensor(y)
        dist.broadcast(t, group_src=0, group=solo)
        s.stop()
        s.step_end()
        s.close()
    finally:
        dist.destroy_process_group()
    dump = Dump(tmp_path / "rank0")

    def coll(name):
        return json.loads(dump.record(name)["args"])["collective"]

    first = coll("Distributed.all_reduce.0.forward")
    assert (first["dtype"], first["bytes"], first["reduce_op"], first["group"]) == ("torch.bfloat16", 8, "sum", [0])
    solo_max = coll("Distributed.all_reduce.1.forward")
    assert (solo_max["reduce_op"], solo_max["group_seq"]) == ("max", 0)
    assert solo_max["group_name"] != first["group_name"]
    asynchronous = coll("Distributed.all_reduce.2.forward")
    assert (asynchronous["async_op"], asynchronous["group_seq"]) == (True, 1)  # the default group's second
    assert not any(k.startswith("output") for k in dump.rows("Distributed.all_reduce.2.forward"))
    functional = coll("Distributed.all_reduce.3.forward")
    assert (functional["reduce_op"], functional["group_seq"], functional["async_op"]) == ("avg", 1, True)
    assert list(dump.rows("Distributed.all_reduce.3.forward")) == ["input.0", "output.0"]
    assert coll("Distributed.broadcast.0.forward")["src"] == 0
    assert "Distributed.wait_tensor.0.forward" in dump.names(0)
    with pytest.raises(KeyError):
        coll("Distributed.wait_tensor.0.forward")  # waiting is no collective


def test_a_group_the_capture_saw_ends_with_the_scripts_destroy_process_group(tmp_path, monkeypatch):
    """The capture outlives the script (``--run``): it must hold no process group, or the groups a script
    destroys stay alive with their gloo threads until the interpreter exits, where a thread torn down while
    running aborts the process ("terminate called without an active exception")."""
    import gc
    import weakref

    import torch
    import torch.distributed as dist
    from dist_support import free_port
    from test_capture_support import make_session

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    s = make_session(tmp_path, level="L1")
    try:
        solo = dist.new_group([0])
        s.start()
        t = torch.ones(4)
        dist.all_reduce(t, group=solo)  # an explicit group, as pipelining and FSDP2 pass theirs
        dist.all_reduce(t, group=dist.group.WORLD)
        dist.broadcast(t, src=0, group=solo, async_op=True).wait()
        s.stop()
        s.step_end()
        groups = [weakref.ref(solo), weakref.ref(dist.group.WORLD)]
        del solo
    finally:
        dist.destroy_process_group()
    gc.collect()
    assert [g() for g in groups] == [None, None]  # the session (still open) kept neither
    s.close()


# -- first divergence across ranks -----------------------------------------------------------------------------
def test_a_divergence_received_through_an_all_reduce_points_back_to_its_rank():
    import numpy as np

    from engines.compare.collective_links import link_collectives

    def entries(*rows):
        keys = ("rank", "step", "record", "score", "in_err", "out_err", "floor", "order")
        cols = {k: np.array([r[j] for r in rows]) for j, k in enumerate(keys)}
        cols["score"] = cols["score"].astype(np.float64)
        cols["tier"] = np.zeros(len(rows), dtype=np.uint8)
        cols["note"] = np.array([""] * len(rows), dtype=object)
        order = np.lexsort((cols["order"], cols["step"], cols["rank"], -cols["score"], cols["tier"]))
        return {k: v[order] for k, v in cols.items()}

    f32, bf16 = 2.0 ** -20, 2.0 ** -8
    div = entries(
        (1, 0, "Torch.mul.0.forward", 0.2 / bf16, 0.0, 0.2, bf16, 3),  # the fault: a bf16 op on rank 1
        (1, 0, "Distributed.all_reduce.0.forward", 0.25, 0.2, 0.05, f32, 4),
        (0, 0, "Distributed.all_reduce.0.forward", 0.05 / f32, 0.0, 0.05, f32, 4),  # received: inputs matched
        (0, 0, "Torch.exp.0.forward", 1.0, 0.05, 0.05, f32, 5),
    )
    assert (div["rank"][0], div["record"][0]) == (0, "Distributed.all_reduce.0.forward")  # per-rank scores alone
    coll = {"op": "all_reduce", "group": [0, 1], "group_seq": 0, "group_name": "0"}
    linked = link_collectives(div, {(r, 0, "Distributed.all_reduce.0.forward"): coll for r in (0, 1)})
    assert (linked["rank"][0], linked["record"][0]) == (1, "Torch.mul.0.forward")
    received = [i for i in range(4) if linked["rank"][i] == 0 and linked["record"][i].startswith("Distributed")][0]
    assert linked["score"][received] == 1.0
    assert linked["note"][received] == "received through all_reduce #0 on group [0, 1] from rank 1"
    assert list(linked["position"]) == [1, 2, 3, 4]
    assert link_collectives(div, {}) is div  # a dump without collective records: the ranking as it was


def test_the_clock_counts_collectives_per_group_across_step_ends():
    from engines.adapters.torch import collectives

    tracker = collectives.CollectiveTracker()
    start = tracker.mark()
    tracker._count("world")
    middle = tracker.mark()
    tracker._count("pair")
    tracker._count("world")
    assert tracker.clock(start) == {} and tracker.clock(middle) == {"world": 1}
    assert tracker.clock(tracker.mark()) == {"world": 2, "pair": 1}
    tracker.rebase()  # a step ended: the order is dropped, the counts stay
    assert tracker.order == [] and tracker.clock(tracker.mark()) == {"world": 2, "pair": 1}
    assert tracker._count("world") == 2
    assert tracker.clock(middle) == {"world": 2, "pair": 1}  # a mark of an earlier step reads this step's start


def test_an_all_reduce_that_overflows_on_its_own_is_the_origin():
    # every member's inputs were finite (rank 1 read and clean until after): a float16 sum beyond 65504
    coll = dict(_coll(2, group=(0, 1)), dtype="torch.float16")
    calls = {0: [_call("Distributed.all_reduce.2.forward", "received", {"0": 3}, coll)],
             1: [_call("Distributed.all_reduce.2.forward", "received", {"0": 3}, coll)]}
    found = cross_rank_origin(calls)
    assert (found["rank"], found["name"]) == (0, "Distributed.all_reduce.2.forward")
    assert "the collective itself made them" in found["reason"]
    unread = cross_rank_origin({0: calls[0]})  # rank 1's store missing: no claim either way
    assert "an unrecorded rank" in unread["chain"][0]


@pytest.mark.slow
def test_compare_of_two_2_rank_runs_points_the_received_all_reduce_back_to_rank_1(tmp_path):
    sides = {"golden": {"BED_NAN_RANK": "-1"}, "target": {"BED_NAN_RANK": "1", "BED_SHIFT": "1.001"}}
    for side in sides:
        (tmp_path / side).mkdir()
        _job(tmp_path / side, "statistics", "nan_allreduce")
    with ThreadPoolExecutor(2) as pool:  # the two launches side by side
        procs = list(pool.map(lambda s: torchrun(tmp_path / s, ["-m", "probe_tui", "run", "cfg.json"], nproc=2,
                                                 env=sides[s], timeout=240), sides))
    for proc in procs:
        ok(proc)
    from engines.compare.engine import run_compare

    outcome = run_compare({"task": "compare", "compare": {
        "target_path": str(tmp_path / "target" / "dump" / "latest"),
        "golden_path": str(tmp_path / "golden" / "dump" / "latest")}}, write=False)
    first = outcome.summary["suspect_groups"][0]
    assert (first["record"], first["rank"]) == ("Tensor.add.0.forward", 1)  # rank 1 added 1.001, not 1
    div = outcome.divergence
    notes = {(int(r), int(s)): str(n) for r, s, rec, n in zip(div["rank"], div["step"], div["record"], div["note"])
             if rec == "Distributed.all_reduce.0.forward"}
    assert notes[(0, 0)] == "received through all_reduce #0 on group [0, 1] from rank 1"
    assert "received" not in notes[(1, 0)]  # rank 1's own input had diverged: not received

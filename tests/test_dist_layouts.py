"""Every task on every parallel layout, under torchrun (gloo, CPU, 2 processes): the job exits 0, every rank
writes its records, the records name what that rank ran, and the training's losses are bit-identical to a plain
torchrun run of the same bed.

The beds (tests/dist_beds/): DDP, FSDP2 (``fully_shard``), pipeline parallel (GPipe, 2 stages, 2 micro-batches) and
Megatron-style manual TP. A launch costs about ten seconds, so the suite keeps the plain run and statistics at
``mix`` on every bed, and each other task on the beds where it is most at risk: module-level statistics on DDP,
the monitor and grad_probe on FSDP2 (DTensor parameters and gradients), overflow_check on the pipeline (receive
buffers, uninitialised shape-inference inputs) and tensor on Megatron TP (explicit collectives). The full matrix
(every task on every bed) was run by hand when the beds were added.
"""

import json
import math
from pathlib import Path
from typing import Any, Dict, List

import pytest
from dist_support import bed, losses, ok, torchrun

from engines.grad_probe.reader import GradReader
from engines.monitor.reader import open_metrics
from engines.overflow.results import read_calls, read_steps
from tests.dump_support import Dump, only_run

pytestmark = pytest.mark.slow

BEDS = ("ddp", "fsdp2", "pp", "megatron")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Each bed's per-rank losses from a plain torchrun run (no probe-tui), made once per module."""
    cache: Dict[str, Dict[int, List[float]]] = {}

    def get(name: str) -> Dict[int, List[float]]:
        if name not in cache:
            cwd = tmp_path_factory.mktemp("plain-" + name)
            ok(torchrun(cwd, [bed(name)]))
            cache[name] = losses(cwd)
            assert sorted(cache[name]) == [0, 1]
        return cache[name]

    return get


def run_job(tmp_path: Path, name: str, task: str, **fields: Any) -> Path:
    """A probe-tui job on bed ``name`` under torchrun; returns the run folder (exit 0 asserted)."""
    config = {"task": task, "dump_path": "dump", "target": {"script": bed(name)}}
    config.update(fields)
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    proc = ok(torchrun(tmp_path, ["-m", "probe_tui", "run", "cfg.json"], nproc=2))
    err = proc.stderr.decode()
    assert "failed" not in err and "Traceback" not in err, err[-3000:]  # no hook failed, no step was skipped
    run = only_run(tmp_path / "dump")
    assert sorted(p.name for p in run.iterdir()) == ["rank0", "rank1", "run.json"]
    return run


def same_losses(tmp_path: Path, name: str, plain) -> None:
    got = losses(tmp_path)
    assert got == plain(name), "capture changed the training's numbers"


def dumps(run: Path) -> Dict[int, Dump]:
    out = {}
    for rank in (0, 1):
        out[rank] = Dump(run / ("rank%d" % rank))
        assert out[rank].steps() == [0, 1] and out[rank].reader.meta["rank"] == rank
    return out


def stats(dump: Dump, name: str, slot: str, step: int = 0) -> tuple:
    row = dump.rows(name, step)[slot]
    return tuple(float(row[k]) for k in ("max", "min", "mean", "norm"))


# -- statistics at mix on every bed ------------------------------------------------------------------------------

def test_ddp_mix(tmp_path, plain):
    run = run_job(tmp_path, "ddp", "statistics", level="mix")
    same_losses(tmp_path, "ddp", plain)
    for dump in dumps(run).values():
        names = dump.names(0)
        # DDP's "module." prefix is stripped: the same names as a single-process run
        for want in ("Module.up.Linear.forward.0", "Functional.linear.0.forward", "Torch.relu.0.forward",
                     "Module.down.Linear.backward.0", "Module.up.Linear.parameters_grad.0"):
            assert want in names, (want, names)
    ranks = dumps(run)
    # each rank's own slice of the batch, and its own gradient: recorded as autograd accumulates it, before
    # DDP's bucketed all-reduce averages it (what the optimizer then reads is grad_probe's and the monitor's)
    for record, slot in (("Module.up.Linear.forward.0", "input.0"), ("Module.up.Linear.parameters_grad.0", "weight")):
        assert stats(ranks[0], record, slot) != stats(ranks[1], record, slot)
    assert stats(ranks[0], "Module.up.Linear.forward.0", "parameters.weight") == \
        stats(ranks[1], "Module.up.Linear.forward.0", "parameters.weight")


def test_fsdp2_mix(tmp_path, plain):
    run = run_job(tmp_path, "fsdp2", "statistics", level="mix")
    same_losses(tmp_path, "fsdp2", plain)
    for dump in dumps(run).values():
        names = dump.names(0)
        assert not any("FSDP" in n for n in names), names  # the model's own classes, not fully_shard's
        for want in ("Module.up.Linear.forward.0", "Module.down.Linear.forward.0", "Functional.linear.1.forward",
                     "Module.up.Linear.parameters_grad.0", "Distributed.all_gather_single.0.forward"):
            assert want in names, (want, names)
        # FSDP2 parameters are DTensors: their rows hold this rank's shard (dim 0 of two), with its placement
        rank = dump.reader.meta["rank"]
        rows = dump.rows("Module.up.Linear.parameters_grad.0")
        assert set(rows) == {"weight", "bias"} and str(rows["weight"]["shape"]) == "[8, 8]"
        assert json.loads(rows["weight"]["dist"]) == {"global_shape": [16, 8], "placements": ["S(0)"],
                                                      "mesh": [0, 1], "mesh_dims": ["dp"], "coord": [rank]}


def test_pp_mix(tmp_path, plain):
    run = run_job(tmp_path, "pp", "statistics", level="mix")
    same_losses(tmp_path, "pp", plain)
    ranks = dumps(run)
    first, last = ranks[0].names(0), ranks[1].names(0)
    # each stage records its own modules only; micro-batches are calls 1 and 2 (call 0: shape inference)
    assert {"Module.up.Linear.forward.1", "Module.up.Linear.forward.2", "Module.up.Linear.parameters_grad.0",
            "Distributed.isend.2.forward"} <= set(first)
    assert {"Module.down.Linear.forward.1", "Module.down.Linear.forward.2", "Module.down.Linear.parameters_grad.0",
            "Distributed.irecv.0.forward"} <= set(last)
    assert not any(n.startswith("Module.down") for n in first) and not any(n.startswith("Module.up") for n in last)
    # what stage 1 received is what stage 0 sent, though the receive buffer was filled after its irecv record
    for call in (1, 2):
        sent = stats(ranks[0], "Torch.relu.%d.forward" % call, "output.0")
        received = stats(ranks[1], "Module.down.Linear.forward.%d" % call, "input.0")
        assert sent == received and all(math.isfinite(v) for v in sent)


def test_megatron_mix(tmp_path, plain):
    run = run_job(tmp_path, "megatron", "statistics", level="mix")
    same_losses(tmp_path, "megatron", plain)
    ranks = dumps(run)
    for dump in ranks.values():
        names = dump.names(0)
        for want in ("Module.up.Linear.forward.0", "Module.down.Linear.forward.0", "Module.head.Linear.forward.0",
                     "Distributed.all_reduce.0.forward", "Distributed.all_gather.0.forward",
                     "Module.up.Linear.parameters_grad.0"):
            assert want in names, (want, names)
    # the row-parallel layer's partial sums differ per rank; the all-reduce makes them one
    assert stats(ranks[0], "Distributed.all_reduce.0.forward", "input.0") != \
        stats(ranks[1], "Distributed.all_reduce.0.forward", "input.0")
    assert stats(ranks[0], "Distributed.all_reduce.0.forward", "output.0") == \
        stats(ranks[1], "Distributed.all_reduce.0.forward", "output.0")


# -- the other tasks, each on the bed where it is most at risk -----------------------------------------------------

def test_ddp_l0(tmp_path, plain):
    run = run_job(tmp_path, "ddp", "statistics", level="L0")
    same_losses(tmp_path, "ddp", plain)
    for dump in dumps(run).values():
        for step in (0, 1):
            assert sorted(dump.names(step)) == ["Module.down.Linear.backward.0", "Module.down.Linear.forward.0",
                                                "Module.down.Linear.parameters_grad.0", "Module.up.Linear.backward.0",
                                                "Module.up.Linear.forward.0", "Module.up.Linear.parameters_grad.0"]


def test_fsdp2_monitor(tmp_path, plain):
    run = run_job(tmp_path, "fsdp2", "monitor",
                  monitor={"targets": {}, "wg_distribution": True, "xy_distribution": True,
                           "ops": ["norm", "min", "max", "nans"]})
    same_losses(tmp_path, "fsdp2", plain)
    for rank in (0, 1):
        with open_metrics(run / ("rank%d" % rank)) as metrics:
            assert metrics.steps() == [0, 1]
            keys = {s.key for s in metrics.series()}
            # sharded (DTensor) weight gradients are measured, as this rank's shard
            for want in ("grad_reduced/up.weight/norm", "grad_reduced/down.bias/max", "train/grad_norm/value",
                         "actv/up.output/norm"):
                assert want in keys, (want, sorted(keys))
            norms = metrics.read("grad_reduced/up.weight/norm")
            assert all(math.isfinite(v) and v > 0 for v in norms.values)


def test_fsdp2_grad_probe(tmp_path, plain):
    run = run_job(tmp_path, "fsdp2", "grad_probe", grad_probe={"grad_level": "L2", "bounds": [-0.01, 0, 0.01]})
    same_losses(tmp_path, "fsdp2", plain)
    for rank in (0, 1):
        with GradReader(run / ("rank%d" % rank)) as grads:
            assert grads.steps() == [0, 1]
            step = grads.read_step(1)
            assert step.names == ["up.weight", "up.bias", "down.weight", "down.bias"]
            # each rank's shard of a gradient sharded on dim 0 over two ranks
            assert [tuple(s) for s in step.shapes] == [(8, 8), (8,), (4, 16), (4,)]


def test_pp_overflow_check(tmp_path, plain):
    run = run_job(tmp_path, "pp", "overflow_check", level="L1")
    same_losses(tmp_path, "pp", plain)
    for rank in (0, 1):
        rank_dir = run / ("rank%d" % rank)
        steps = read_steps(rank_dir)
        assert [s["step"] for s in steps] == [0, 1] and all(s["checked"] > 0 for s in steps)
        # receive buffers and shape inference run on uninitialised (NaN) memory: no overflow for all that
        assert read_calls(rank_dir) == []


def test_megatron_tensor(tmp_path, plain):
    run = run_job(tmp_path, "megatron", "tensor", level="mix")
    same_losses(tmp_path, "megatron", plain)
    ranks = dumps(run)
    gathered = []
    for dump in ranks.values():
        row = dump.rows("Distributed.all_gather.0.forward")
        gathered.append([dump.reader.tensor_data(int(row["output.0.%d" % i]["row"])) for i in (0, 1)])
        own = dump.reader.tensor_data(int(row["input.1"]["row"]))
        assert (gathered[-1][dump.reader.meta["rank"]] == own).all()  # a rank's slot holds its own shard
    for a, b in zip(*gathered):
        assert a is not None and (a == b).all()  # both ranks gathered the same pieces

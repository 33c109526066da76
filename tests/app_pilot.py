"""Helpers of the app tests: running pilot coroutines, waiting for a state instead of sleeping, and small results
made by the engines' own writers (deterministic, no framework) for the views.

``wait_until`` replaces ``await pilot.pause()`` followed by an assert: under CPU load (two pytest workers on two
cores) a mount, a worker or a child process can take longer than one pause.
"""

import asyncio
import functools
import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import numpy as np

SAMPLES = Path(__file__).resolve().parents[1] / "sample_configs"
META = {"rank": 0, "world_size": 1, "framework": "pytorch"}


def pilot_test(coro_fn):
    """Run an ``async def`` test with asyncio.run (no pytest-asyncio in this project)."""

    @functools.wraps(coro_fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(coro_fn(*args, **kwargs))

    return wrapper


async def wait_until(pilot, predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Pause the pilot until ``predicate()`` is true (returns its value); AssertionError after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError("not reached in {:.0f} s: {}".format(timeout, what or predicate))
        await pilot.pause(0.05)


async def open_view(pilot, path: Path, screen_type: type, timeout: float = 30.0):
    """Open ``path`` through the app's openers (once the home screen is up) and wait for ``screen_type``."""
    from probe_tui.app.screens.home import HomeScreen

    await wait_until(pilot, lambda: isinstance(pilot.app.screen, HomeScreen), timeout, "the home screen")
    pilot.app.open_path(path)
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, screen_type) and pilot.app.screen.is_mounted,
                     timeout, "{} open on {}".format(screen_type.__name__, path))
    await pilot.pause()
    return pilot.app.screen


@asynccontextmanager
async def viewing(path: Path, screen_type: type, root: Optional[Path] = None, size=(120, 40)):
    """The app on ``root`` (default: the path's folder), ``path`` open in ``screen_type``: (pilot, screen)."""
    from probe_tui.app.app import ProbeApp

    app = ProbeApp(Path(path).parent if root is None else root, root_label="~/exp")
    async with app.run_test(size=size) as pilot:
        yield pilot, await open_view(pilot, path, screen_type)


def count_layouts(monkeypatch, screen_type) -> list:
    """The screens of ``screen_type`` laid out (each call appends the screen)."""
    layouts = []
    original = screen_type._refresh_layout

    def counted(self, size=None, scroll=False):
        layouts.append(self)
        return original(self, size, scroll)

    monkeypatch.setattr(screen_type, "_refresh_layout", counted)
    return layouts


def rendered_text(renderable: Any, width: int = 60) -> str:
    """The plain text of a rich renderable (a detail pane's content)."""
    from rich.console import Console

    if renderable is None:
        return ""
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


# ---- real runs of the samples, relocated under a test folder ------------------------------------------------------
def run_sample(root: Path, name: str, *, dump_path: Optional[str] = None, **changes: Any):
    """Run ``sample_configs/<name>`` in this process with its output under ``root``; ``changes`` update the config
    (``target``, a task section...). Returns the runner's outcome."""
    import schemas
    from engines.runner import run_job

    config = json.loads((SAMPLES / name).read_text(encoding="utf-8"))
    config["dump_path"] = str(root / (dump_path or config["dump_path"].lstrip("./")))
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    outcome = run_job(schemas.load_config(config))
    assert outcome.exit_code == 0, outcome.summary
    return outcome


# ---- a compare result with a module tree, from hand-built dumps ----------------------------------------------------
def _stats(a: np.ndarray) -> Dict[str, float]:
    a = a.astype(np.float64)
    return {"max": a.max(), "min": a.min(), "mean": a.mean(), "norm": float(np.linalg.norm(a))}


def _model(golden: bool):
    """Records (name, parent, [(slot, array)]) of a two-block model: block 1's softmax is twice the golden's in the target,
    the target runs one extra op (unmatched), the golden is a few ulp off everywhere else."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 16)).astype(np.float32)

    def noisy(a):
        if not golden:
            return a
        return (a * (1 + np.float32(2 ** -22) * np.random.default_rng(a.size).choice([-1, 1], a.shape))).astype(
            np.float32)

    recs = []
    h = x
    for block in range(2):
        blk = "Module.blocks.{}.Block.forward.0".format(block)
        attn = "Module.blocks.{}.attn.Attention.forward.0".format(block)
        mlp = "Module.blocks.{}.mlp.MLP.forward.0".format(block)
        recs.append((blk, "", [("input.0", h)]))
        recs.append((attn, blk, [("input.0", h)]))
        q = noisy((h * np.float32(0.5)).astype(np.float32))
        recs.append(("Functional.linear.{}.forward".format(2 * block), attn, [("input.0", h), ("output.0", q)]))
        e = np.exp(q - q.max(-1, keepdims=True))
        p = noisy((e / e.sum(-1, keepdims=True)).astype(np.float32))
        if block == 1 and not golden:
            p = (p * np.float32(2.0)).astype(np.float32)
        recs.append(("Functional.softmax.{}.forward".format(block), attn, [("input.0", q), ("output.0", p)]))
        g = noisy(np.tanh(p + h).astype(np.float32))
        recs.append(("Functional.linear.{}.forward".format(2 * block + 1), mlp, [("input.0", p), ("output.0", g)]))
        if block == 1 and not golden:
            recs.append(("Tensor.add.0.forward", mlp, [("input.0", g), ("output.0", g + 1)]))
        recs.append((mlp, blk, [("input.0", p), ("output.0", g)]))
        h = g
    recs.append(("Module.head.Linear.forward.0", "", [("input.0", h), ("output.0", noisy(h * 2))]))
    return recs


def write_dump(rank_dir: Path, golden: bool) -> Path:
    from engines.store import DumpWriter

    records = _model(golden)
    with DumpWriter(rank_dir, meta=META) as w:
        names = [r[0] for r in records]
        rows = w.add_records(step=0, name=names, kind=[1 if n.startswith("Module") else 0 for n in names],
                             direction=0, parent=[r[1] for r in records],
                             args=[json.dumps({"args": [], "kwargs": {}})] * len(records))
        cols: Dict[str, list] = {k: [] for k in ("record", "slot", "dtype", "shape", "max", "min", "mean", "norm")}
        for row, (_, _, tensors) in zip(rows, records):
            for slot, arr in tensors:
                stats = _stats(arr)
                for k, v in (("record", row), ("slot", slot), ("dtype", "torch.float32"), ("shape", arr.shape),
                             *stats.items()):
                    cols[k].append(v)
        w.add_tensors(step=0, valid=15, **cols)
        w.commit_step(0)
    return rank_dir


def make_compare_result(root: Path) -> Path:
    """A compare result (the real engine, statistics mode) of the two hand-built dumps, in ``root/result``."""
    from engines.compare.engine import run_compare

    target = write_dump(root / "target" / "rank0", golden=False)
    golden = write_dump(root / "golden" / "rank0", golden=True)
    out = root / "result"
    run_compare({"task": "compare", "compare": {"target_path": str(target), "golden_path": str(golden),
                                                "mode": "statistics", "formats": ["hdf5"], "output_path": str(out)}},
                None)
    return out


# ---- a monitor store, written step by step ------------------------------------------------------------------------
class MetricsRun:
    """A monitor rank folder written by the engine's writer: ``step(n)`` commits one step of three series (loss,
    a gradient norm of two blocks); ``spike=True`` multiplies block 1's norm by 1000 (a turbulence alert)."""

    KEYS = [("train", "loss", "value"), ("grad_reduced", "blocks.0.fc.weight", "norm"),
            ("grad_reduced", "blocks.1.fc.weight", "norm")]

    def __init__(self, run_dir: Path) -> None:
        from engines.monitor.alerts import RuleSpec
        from engines.monitor.writer import MetricsWriter

        self.run_dir = Path(run_dir)
        (self.run_dir / "rank0").mkdir(parents=True, exist_ok=True)
        self.writer = MetricsWriter(self.run_dir / "rank0",
                                    rules=[RuleSpec("AnomalyTurbulence", 1.0, "up")])
        self.steps = 0

    def step(self, spike: bool = False) -> None:
        n = self.steps
        values = np.array([6.9 - 0.05 * n + 0.02 * np.sin(n), 0.5 + 0.01 * np.cos(n), 0.4 + 0.01 * np.sin(n)])
        if spike:
            values[2] *= 1000.0
        self.writer.write_step(n, self.KEYS, values)
        self.steps += 1

    def close(self) -> None:
        self.writer.close()


def make_metrics(run_dir: Path, steps: int = 12, spike_at: int = 8) -> Path:
    run = MetricsRun(run_dir)
    for n in range(steps):
        run.step(spike=n == spike_at)
    run.close()
    return run_dir


# ---- grad compare, overflow_check and free_benchmark results through their writers ---------------------------------
def make_grad_result(folder: Path) -> Path:
    from engines.grad_compare import outputs
    from engines.grad_compare.layers import layer_ratios
    from engines.grad_compare.rule import apply_rule
    from engines.grad_compare.similarity import SimilarityTable

    params = ["embed.weight", "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.1.fc.weight", "blocks.1.fc.bias",
              "head.weight"]
    steps = [0, 1, 2, 3]
    values = np.full((len(params), len(steps)), 0.999)
    values[3] = [0.995, 0.99, 0.94, 0.93]  # blocks.1.fc.weight drops at step 2
    table = SimilarityTable(steps, params, np.array([64, 256, 16, 256, 16, 128]), values)
    target = np.ones((len(params), len(steps)))
    golden = np.ones((len(params), len(steps)))
    target[3:5, 2:] = 1.5  # blocks.1's gradients grow from step 2
    rank_dir = folder / "rank0"
    rank_dir.mkdir(parents=True, exist_ok=True)
    verdict = apply_rule(table, 0.97, 0.03)
    outputs.write_similarities(rank_dir, table)
    outputs.write_violations(rank_dir, verdict)
    outputs.write_layer_ratios(rank_dir, layer_ratios(params, steps, target, golden, 0.1))
    return folder


def make_overflow_run(folder: Path, rank: int = 0, clean: bool = False) -> Path:
    """An overflow_check rank folder (``rank``) of three steps; step 2 flags two calls unless ``clean``."""
    from engines.overflow import origin as og
    from engines.overflow.report import FlaggedCall, StepFindings
    from engines.overflow.results import OverflowWriter

    writer = OverflowWriter(folder / "rank{}".format(rank), dict(META, rank=rank))
    for step in range(3):
        found = StepFindings(step)
        found.checked, found.masks = 120, 4
        if step == 2 and not clean:
            found.add(FlaggedCall(0, "Torch.exp.0.forward", 0, 0, og.PRODUCED,
                                  "produced +inf from finite inputs", "Module.blocks.1.attn.Attention.forward.0",
                                  True, {"output.0": "+inf"}, where="model.py:105 softmax: e = torch.exp(scaled)"))
            found.add(FlaggedCall(1, "Tensor.sum.0.forward", 0, 0, og.INPUTS,
                                  "inputs already non-finite: input.0 (+inf)", "", False, {"input.0": "+inf",
                                                                                          "output.0": "+inf"}))
            found.flagged, found.stopped = 2, True
        writer.write(found)
    writer.close()
    return folder


def make_free_benchmark_run(folder: Path) -> Path:
    from engines.free_benchmark.results import CheckRow, ResultWriter

    writer = ResultWriter(folder / "rank0", 0, META)
    for step in range(3):
        rows = [CheckRow(step, "Functional.linear.0.forward", "forward", "improve_precision", "check", 0,
                         "torch.bfloat16", "[2, 8]", 1.0005 + 0.0001 * step, 1.004, True),
                CheckRow(step, "Demo.naive_softmax.0.forward", "forward", "improve_precision", "check", 0,
                         "torch.bfloat16", "[2, 4, 8, 8]", 1.0078 + 0.0008 * step, 1.004, False)]
        writer.write(step, rows)
    writer.close()
    return folder


def make_rank_compare_result(root: Path, ranks: int = 2, faulty: int = 1) -> Path:
    """A compare result of ``ranks`` rank pairs (the real engine, statistics mode): every rank of the target matches
    the golden except ``faulty``, whose block 1 softmax is doubled. In ``root/result``."""
    from engines.compare.engine import run_compare

    for rank in range(ranks):
        write_dump(root / "target" / "rank{}".format(rank), golden=rank != faulty)
        write_dump(root / "golden" / "rank{}".format(rank), golden=True)
    out = root / "result"
    run_compare({"task": "compare", "compare": {"target_path": str(root / "target"),
                                                "golden_path": str(root / "golden"), "mode": "statistics",
                                                "formats": ["hdf5"], "output_path": str(out)}}, None)
    return out


def make_rank_metrics(run_dir: Path, ranks: int = 2, steps: int = 6, spike_rank: int = 1, spike_at: int = 4) -> Path:
    """A monitor run folder of ``ranks`` rank folders (the engine's writer, with its rank in the store): the loss is
    ``rank``-shifted (rank r's loss is ``r`` above rank 0's) and block 1's norm spikes on ``spike_rank`` at
    ``spike_at`` (an alert of that rank only)."""
    from engines.monitor.alerts import RuleSpec
    from engines.monitor.writer import MetricsWriter

    for rank in range(ranks):
        writer = MetricsWriter(Path(run_dir) / "rank{}".format(rank), rank=rank, world_size=ranks,
                               rules=[RuleSpec("AnomalyTurbulence", 1.0, "up")])
        for n in range(steps):
            values = np.array([6.9 - 0.05 * n + rank, 0.5 + 0.01 * np.cos(n), 0.4 + 0.01 * np.sin(n)])
            if rank == spike_rank and n == spike_at:
                values[2] *= 1000.0
            writer.write_step(n, MetricsRun.KEYS, values)
        writer.close()
    (Path(run_dir) / "run.json").write_text(json.dumps({"run_id": Path(run_dir).name, "task": "monitor",
                                                         "world_size": ranks}), encoding="utf-8")
    return Path(run_dir)

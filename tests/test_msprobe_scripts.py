"""msprobe's documented in-script examples run on probe-tui with only the import line changed (docs/MSPROBE.md).

The scripts are in tests/fixtures/msprobe_scripts (see its README). The PyTorch ones run one after the other in
one subprocess, the MindSpore ones in another (``tests/msprobe_script_batch.py``); each case then checks what its
script wrote. ``unchanged_cross_file.py`` keeps ``from msprobe.pytorch import ...`` and runs through
``python -m probe_tui.compat.shim``, to its end: it never calls ``step()``, so its dump is written at exit.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "fixtures" / "msprobe_scripts"
BATCH = ROOT / "tests" / "msprobe_script_batch.py"


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MONITOR_OUTPUT_DIR"] = "monitor_output"  # msprobe's monitor output folder, relative to each script's
    env.pop("PROBE_TUI_RANKS", None)
    return env


def _stage(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    for f in SCRIPTS.glob("*.py"):
        shutil.copy(f, folder / f.name)
    config = SCRIPTS / (name + ".json")
    if config.is_file():
        shutil.copy(config, folder / "config.json")
    return folder


def _run_batch(root: Path, names: List[str]) -> None:
    for name in names:
        _stage(root, name)
    proc = subprocess.run([sys.executable, str(BATCH), str(root)] + names, env=_env(), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _records(rank_dir: Path) -> List[Tuple[int, str]]:
    from engines.store import DumpReader

    with DumpReader(rank_dir) as dump:
        recs = dump.records()
        return [(int(s), str(n)) for s, n in zip(recs["step"], recs["name"])]


def _input_shapes(rank_dir: Path, prefix: str) -> List[str]:
    """The ``input.0`` shape of each record whose name starts with ``prefix``, in record order."""
    from engines.store import DumpReader

    with DumpReader(rank_dir) as dump:
        recs = dump.records()
        names = {int(row): str(n) for row, n in zip(recs["row"], recs["name"])}
        t = dump.tensors()
        return [str(shape) for rec, slot, shape in zip(t["record"], t["slot"], t["shape"])
                if names[int(rec)].startswith(prefix) and str(slot) == "input.0"]


def _dump(folder: Path) -> Path:
    error = folder / "error.txt"
    assert not error.exists(), error.read_text()
    return folder / "dump" / "latest" / "rank0"


class Case(NamedTuple):
    name: str
    check: Callable[[Path], None]


def _quickstart(folder: Path) -> None:
    names = [n for _, n in _records(_dump(folder))]
    assert names == ["Torch.randn.0.forward", "Functional.linear.0.forward", "Functional.relu.0.forward",
                     "Tensor.sum.0.forward", "Tensor.sum.0.backward", "Functional.relu.0.backward",
                     "Functional.linear.0.backward"]


def _training_loop(folder: Path) -> None:
    recs = _records(_dump(folder))
    assert sorted({s for s, _ in recs}) == [0, 1]  # "step": [0, 1] of three batches
    for step in (0, 1):
        names = {n for s, n in recs if s == step}
        assert {"Module.0.Linear.forward.0", "Module.0.Linear.backward.0", "Module.0.Linear.parameters_grad.0",
                "Functional.linear.0.forward", "Functional.cross_entropy.0.backward"} <= names


def _module_dump(folder: Path) -> None:
    # module_dump..module_dump_end: the module is one unit; nothing inside it (linear_1, linear_2, relu) is dumped
    names = [n for _, n in _records(_dump(folder))]
    assert names == ["Torch.randn.0.forward", "Module.MyModuleOP.ModuleOP.forward.0", "Tensor.sum.0.forward",
                     "Tensor.sum.0.backward", "Module.MyModuleOP.ModuleOP.backward.0"]


def _cross_file(folder: Path) -> None:
    # PrecisionDebugger.start()/stop() called on the class inside forward: linear_1 only; its backward too
    assert [n for _, n in _records(_dump(folder))] == ["Functional.linear.0.forward", "Functional.linear.0.backward"]


def _token_range(folder: Path) -> None:
    rank = _dump(folder)
    names = [n for _, n in _records(rank)]
    assert [n for n in names if n.startswith("Module.head")] == [
        "Module.head.Linear.forward.0", "Module.head.Linear.forward.1", "Module.head.Linear.forward.2"]
    # calls 1..3 of the model: the prompt (3 tokens) plus 1, 2, 3 generated ones
    assert _input_shapes(rank, "Functional.embedding.") == ["[4]", "[5]", "[6]"]


def _custom_api(folder: Path) -> None:
    recs = _records(_dump(folder))
    for step in (0, 1):
        names = [n for s, n in recs if s == step]
        assert "module_a.compute.0.forward" in names and "module_a.compute.0.backward" in names
        assert not any("tanh" in n or n.startswith("Tensor.__mul__") or n.startswith("Tensor.mul") for n in names)
    assert "restored: True" in (folder / "stdout.txt").read_text()


def _save(folder: Path) -> None:
    recs = _records(_dump(folder))
    for step in (0, 1):
        assert [n for s, n in recs if s == step] == ["hidden.0.debug", "state.0.debug", "hidden_grad.0.debug"]


def _init_step(folder: Path) -> None:
    recs = _records(_dump(folder))
    assert sorted({s for s, _ in recs}) == [10, 11]  # set_init_step(10), "step": [10, 11] of steps 10, 11, 12


def _v8_model_arg(folder: Path) -> None:
    names = [n for _, n in _records(_dump(folder))]
    assert "Module.0.Linear.forward.0" in names and "Module.0.Linear.backward.0" in names


def _seed_all(folder: Path) -> None:
    out = (folder / "stdout.txt").read_text()
    # the values msprobe's seed_all page prints for this example
    assert out.splitlines()[:2] == ["tensor(-0.0866)", "tensor(0.2038)"], out
    assert "deterministic: True" in out


def _grad_probe(folder: Path) -> None:
    from engines.grad_probe.reader import GradReader

    with GradReader(_dump(folder)) as grads:
        assert grads.steps() == [0, 1, 2]


def _monitor_steps(folder: Path) -> List[int]:
    from engines.monitor.reader import open_metrics

    assert not (folder / "error.txt").exists(), (folder / "error.txt").read_text()
    with open_metrics(folder / "monitor_output" / "latest" / "rank0") as metrics:
        tags = {s.tag for s in metrics.series()}
        assert tags & {"post_grad", "grad_reduced", "param_origin", "param"}, tags
        return metrics.steps()


def _trainer_mon(folder: Path) -> None:
    assert _monitor_steps(folder) == [0, 1, 2]


def _trainer_mon_legacy(folder: Path) -> None:
    assert _monitor_steps(folder) == [5, 6]  # start_iteration=5


TORCH_CASES = [
    Case("pt_quickstart", _quickstart),
    Case("pt_training_loop", _training_loop),
    Case("pt_module_dump", _module_dump),
    Case("pt_cross_file", _cross_file),
    Case("pt_token_range", _token_range),
    Case("pt_custom_api", _custom_api),
    Case("pt_save", _save),
    Case("pt_init_step", _init_step),
    Case("pt_v8_model_arg", _v8_model_arg),
    Case("pt_seed_all", _seed_all),
    Case("pt_grad_probe", _grad_probe),
    Case("pt_trainer_mon", _trainer_mon),
    Case("pt_trainer_mon_legacy", _trainer_mon_legacy),
]


def _run_table(root: Path, cases: List[Case]) -> None:
    """Run every script of ``cases`` in one process, then every check; one failure report naming each case."""
    _run_batch(root, [c.name for c in cases])
    failures: Dict[str, str] = {}
    for case in cases:
        try:
            case.check(root / case.name)
        except AssertionError as exc:
            failures[case.name] = str(exc)[:2000] or "assertion failed"
    assert not failures, "\n\n".join("%s: %s" % item for item in failures.items())


def test_msprobe_doc_examples_pytorch(tmp_path: Path) -> None:
    """One test for the whole table: its scripts share one process (under pytest-xdist, split cases would each
    start that process again)."""
    pytest.importorskip("torch")
    _run_table(tmp_path, TORCH_CASES)


def test_unchanged_msprobe_script_through_the_shim(tmp_path: Path) -> None:
    """``from msprobe.pytorch import PrecisionDebugger`` in two files, msprobe not installed: the shim makes it
    probe-tui's; the script never calls step(), so the dump is written at exit (and the process exits cleanly:
    the store first opened in the exit handler used to crash the interpreter, exit code -11)."""
    pytest.importorskip("torch")
    folder = _stage(tmp_path, "unchanged_cross_file")
    proc = subprocess.run([sys.executable, "-m", "probe_tui.compat.shim", "unchanged_cross_file.py"], cwd=folder,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [n for _, n in _records(folder / "dump" / "latest" / "rank0")] == [
        "Functional.linear.0.forward", "Functional.linear.0.backward"]


def _ms_loop(folder: Path) -> None:
    recs = _records(_dump(folder))
    assert sorted({s for s, _ in recs}) == [0, 1]
    names = {n for _, n in recs}
    assert {"Cell.dense1.Dense.forward.0", "Cell.dense1.Dense.backward.0", "Cell.dense1.Dense.parameters_grad.0",
            "Primitive.MatMul.0.forward"} <= names


def _ms_model_train(folder: Path) -> None:
    # MsprobeStep: one capture step per Model.train step; "step": [0, 1] of the three batches
    recs = _records(_dump(folder))
    assert sorted({s for s, _ in recs}) == [0, 1]
    for step in (0, 1):
        names = [n for s, n in recs if s == step]
        assert "Primitive.MatMul.0.forward" in names and "Primitive.MatMul.0.backward" in names


MS_CASES = [Case("ms_pynative_loop", _ms_loop), Case("ms_model_train", _ms_model_train)]


def test_msprobe_doc_examples_mindspore(tmp_path: Path) -> None:
    pytest.importorskip("mindspore")
    _run_table(tmp_path, MS_CASES)

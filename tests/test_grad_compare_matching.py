"""grad_compare matches parameters across a DDP ``module.`` prefix, and a compare that matched nothing is bad
input (exit 2, one line naming both inputs), never "ok"."""

import json
from pathlib import Path

import numpy as np
import pytest

import schemas
from engines.events import NullSink
from engines.grad_compare.engine import run_grad_compare
from probe_tui.cli import main

SHAPES = {"fc.weight": (3, 4), "fc.bias": (3,)}


def _msprobe_grads(root: Path, names, steps=(0, 1), seed=0) -> Path:
    """msprobe's grad_probe L1 layout: rank0/grad_summary_{step}.csv and rank0/step{step}/{param}.npy."""
    rng = np.random.default_rng(seed)
    rank = root / "rank0"
    rank.mkdir(parents=True)
    for step in steps:
        (rank / "step{}".format(step)).mkdir()
        lines = ["param_name,max,min,norm,shape"]
        for name in names:
            grad = rng.standard_normal(SHAPES[name.split("module.", 1)[-1]])
            np.save(rank / "step{}".format(step) / (name + ".npy"), grad > 0)
            lines.append('{},{},{},{},"{}"'.format(name, grad.max(), grad.min(), np.linalg.norm(grad),
                                                   list(grad.shape)))
        (rank / "grad_summary_{}.csv".format(step)).write_text("\n".join(lines) + "\n")
    return root


def _run(tmp_path, target, golden, *flags):
    config = tmp_path / "gc.json"
    config.write_text(json.dumps({"task": "grad_compare", "grad_compare": {
        "target_path": str(target), "golden_path": str(golden), "output_path": str(tmp_path / "out")}}))
    return main([*flags, "--run", str(config)])


def test_a_ddp_module_prefix_on_one_side_still_matches(tmp_path, capsys):
    target = _msprobe_grads(tmp_path / "ddp", ["module.fc.weight", "module.fc.bias"])
    golden = _msprobe_grads(tmp_path / "single", ["fc.weight", "fc.bias"])
    assert _run(tmp_path, target, golden, "--fail-on-findings") == 0
    assert "nothing compared" not in capsys.readouterr().err
    job = schemas.load_config({"task": "grad_compare", "grad_compare": {
        "target_path": str(target), "golden_path": str(golden), "output_path": str(tmp_path / "out2")}})
    result = run_grad_compare(job, NullSink())
    assert result.summary["parameters compared"] == 2 and "parameters not matched" not in result.summary
    assert result.summary["rule"].startswith("ok")


@pytest.mark.parametrize("flags", [(), ("--fail-on-findings",)])
def test_nothing_matched_is_bad_input_naming_both_inputs(tmp_path, capsys, flags):
    target = _msprobe_grads(tmp_path / "a", ["fc.weight"])
    golden = _msprobe_grads(tmp_path / "b", ["fc.bias"])
    assert _run(tmp_path, target, golden, *flags) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1
    assert str(target) in errors[0] and str(golden) in errors[0] and "no parameter name matches" in errors[0]
    assert not (tmp_path / "out").exists()


def test_no_step_in_common_is_bad_input(tmp_path, capsys):
    target = _msprobe_grads(tmp_path / "a", ["fc.weight"], steps=(0,))
    golden = _msprobe_grads(tmp_path / "b", ["fc.weight"], steps=(5,))
    assert _run(tmp_path, target, golden) == 2
    assert "no step in common" in capsys.readouterr().err

"""grad_probe and grad compare end to end on the demo: fp32 vs bf16 autocast, through the runner; similarities,
the rule's verdict and the layer ratios checked against values computed directly from the gradients."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.events import ListSink  # noqa: E402
from engines.grad_compare.layers import layer_of  # noqa: E402
from engines.grad_probe.reader import GradReader  # noqa: E402
from engines.runner import JobError, run_job  # noqa: E402
from schemas import load_config  # noqa: E402

KNOBS = {"preset": "tiny", "steps": 4}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def direct_grads(dtype):
    """Every parameter's gradient at every step of the demo, read in the demo's own on_step callback."""
    from engines.adapters.torch.demo import train

    state, grads = {}, []
    train(dict(KNOBS, dtype=dtype), on_build=lambda m, o: state.update(model=m),
          on_step=lambda step, loss: grads.append({n: p.grad.detach().clone() for n, p in
                                                   state["model"].named_parameters()}))
    return grads


def probe(tmp_path, dtype, level="L1", **section):
    config = {"task": "grad_probe", "dump_path": str(tmp_path / f"grad_{dtype}"),
              "target": {"demo": dict(KNOBS, dtype=dtype)}, "grad_probe": {"grad_level": level, **section}}
    outcome = run_job(load_config(config), events=ListSink())
    assert outcome.exit_code == 0, outcome.summary.get("error")
    return Path(outcome.run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_torch_thread_for_module):
    tmp = tmp_path_factory.mktemp("grad")
    fp32, bf16 = probe(tmp, "fp32"), probe(tmp, "bf16")
    direct = {"fp32": direct_grads("fp32"), "bf16": direct_grads("bf16")}
    return tmp, fp32, bf16, direct


def compare(tmp, target, golden, **section):
    config = {"task": "grad_compare", "dump_path": str(tmp / "cmp"),
              "grad_compare": {"target_path": str(target), "golden_path": str(golden), **section}}
    return run_job(load_config(config), events=ListSink(), fail_on_findings=True)


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def test_the_dump_holds_the_demo_gradients(runs):
    _, fp32, _, direct = runs
    reader = GradReader(fp32 / "rank0")
    assert reader.steps() == [0, 1, 2, 3]
    for step, grads in enumerate(direct["fp32"]):
        data = reader.read_step(step)
        assert data.names == list(grads)
        for i, name in enumerate(data.names):
            assert np.array_equal(data.direction(i), (grads[name] > 0).numpy())
            assert data.norm[i] == pytest.approx(grads[name].norm().item(), rel=1e-6)


def test_grad_compare_fp32_vs_bf16_against_direct_values(runs):
    tmp, fp32, bf16, direct = runs
    outcome = compare(tmp, bf16, fp32, layer_tolerance=0.0005)
    out = Path(outcome.run_dir) / "rank0"
    rows = read_csv(out / "similarities.csv")
    assert rows[0] == ["step", "0", "1", "2", "3"]
    names = list(direct["fp32"][0])
    assert [r[0] for r in rows[1:]] == names + ["summary"]
    # per parameter and step: the fraction of elements whose sign (grad > 0) agrees, computed here directly
    expected = np.array([[float(((direct["bf16"][s][n] > 0) == (direct["fp32"][s][n] > 0)).double().mean())
                          for s in range(4)] for n in names])
    got = np.array([[float(x) for x in r[1:]] for r in rows[1:-1]])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    numels = np.array([direct["fp32"][0][n].numel() for n in names], dtype=float)
    summary = (expected * numels[:, None]).sum(axis=0) / numels.sum()
    np.testing.assert_allclose([float(x) for x in rows[-1][1:]], summary, rtol=1e-12)
    # the rule, applied here the plain way: below 0.97 at step 0, or a drop > 0.03 from the previous step
    violations = [(s, n) for s in range(4) for p, n in enumerate(names)
                  if (s == 0 and expected[p, 0] < 0.97) or (s > 0 and expected[p, s - 1] - expected[p, s] > 0.03)]
    written = [(int(r[0]), r[1]) for r in read_csv(out / "rule_violations.csv")[1:]]
    assert written == violations
    assert violations, "bf16 autocast flips gradient signs in the tiny demo (the k bias gradient is noise)"
    assert outcome.exit_code == 3
    first_step, first_param = violations[0]
    assert outcome.summary["rule"].startswith(f"broken at step {first_step} by {first_param}:")
    # the layer-wise view: sqrt(sum of squared parameter norms) per layer, target / golden, in depth order
    layers = list(dict.fromkeys(layer_of(n) for n in names))
    ratios = read_csv(out / "layer_ratios.csv")
    assert ratios[0] == ["step", "depth", "layer", "target_norm", "golden_norm", "ratio", "over_tolerance",
                         "first_over"]
    for row in ratios[1:]:
        step, depth, layer = int(row[0]), int(row[1]), row[2]
        assert layer == layers[depth]
        members = [n for n in names if layer_of(n) == layer]
        t = sum(direct["bf16"][step][n].double().norm().item() ** 2 for n in members) ** 0.5
        g = sum(direct["fp32"][step][n].double().norm().item() ** 2 for n in members) ** 0.5
        assert float(row[5]) == pytest.approx(t / g, rel=1e-5)
        assert row[6] == str(int(abs(t / g - 1) > 0.0005))
    for step in range(4):
        over = [r for r in ratios[1:] if int(r[0]) == step and r[6] == "1"]
        marked = [r[2] for r in ratios[1:] if int(r[0]) == step and r[7] == "1"]
        assert marked == ([max(over, key=lambda r: int(r[1]))[2]] if over else [])  # nearest the output
    assert {p.name for p in out.glob("*.png")} == {"summary_similarities.png", "similarities_heatmap.png",
                                                   "layer_ratios.png"}


def test_a_run_compared_with_itself_passes(runs):
    tmp, fp32, _, _ = runs
    outcome = compare(tmp, fp32, fp32, plots=False)
    assert outcome.exit_code == 0
    assert outcome.summary["rule"].startswith("ok")
    rows = read_csv(Path(outcome.run_dir) / "rank0" / "similarities.csv")
    assert all(float(x) == 1.0 for r in rows[1:] for x in r[1:])
    assert not list((Path(outcome.run_dir) / "rank0").glob("*.png"))


def test_msprobe_layout_is_read_too(runs, tmp_path):
    """msprobe's grad_probe output (grad_summary_{step}.csv + step{k}/{param}.npy) as the golden side."""
    tmp, fp32, _, direct = runs
    rank = tmp_path / "msprobe" / "rank0"
    for step, grads in enumerate(direct["fp32"]):
        (rank / f"step{step}").mkdir(parents=True)
        with open(rank / f"grad_summary_{step}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["param_name", "max", "min", "norm", "shape"])
            for name, g in grads.items():
                writer.writerow([name, g.max().item(), g.min().item(), g.norm().item(), list(g.shape)])
                np.save(rank / f"step{step}" / f"{name}.npy", (g > 0).numpy())
    outcome = compare(tmp, fp32, tmp_path / "msprobe", plots=False)
    assert outcome.exit_code == 0 and outcome.summary["steps compared"] == 4
    assert outcome.summary["parameters compared"] == len(direct["fp32"][0])


def test_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(JobError, match="grad_compare.target_path: .*nope: no such file or folder"):
        compare(tmp_path, tmp_path / "nope", tmp_path)
    assert not (tmp_path / "cmp").exists()  # nothing written


def test_csv_export_and_run_summary(tmp_path):
    run = probe(tmp_path, "fp32", level="L0", export_csv=True)
    rows = read_csv(run / "rank0" / "grad_summary_3.csv")
    assert rows[0] == ["param_name", "MD5", "max", "min", "norm", "shape"]
    assert len(rows[1][1]) == 8
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "finished" and meta["summary"]["steps_recorded"] == 4

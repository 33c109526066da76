"""MindSpore against PyTorch: the two demos compare with every layer matched (the built-in mapping for names,
the demo's user mapping file for the two ops MindSpore spells differently) and only float32-noise differences;
an op perturbed on the MindSpore side is ranked first although the first op that differs is another."""

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")
pytest.importorskip("torch", reason="the cross-framework compare needs the PyTorch demo too")

from test_capture_support import run_demo as run_torch_demo  # noqa: E402
from test_mindspore_support import run_demo as run_ms_demo  # noqa: E402

from engines.compare.engine import run_compare  # noqa: E402
from schemas import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAPPING = ROOT / "engines" / "adapters" / "mindspore" / "demo_api_mapping.json"
KNOBS = {"preset": "tiny", "steps": 2}
# Rows MindSpore has and PyTorch does not: ops.gather's axis argument, the LayerNorm primitive's mean and rstd.
NO_COUNTERPART = (["Functional.gather.%d.forward.input.2" % i for i in range(2)]
                  + ["Primitive.LayerNorm.%d.forward.output.%d" % (i, k) for i in range(5) for k in (1, 2)])


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("xfw")
    run_torch_demo(root / "pt", dict(KNOBS), level="mix")
    run_ms_demo(root / "ms", KNOBS, level="mix")
    run_ms_demo(root / "ms_eps", dict(KNOBS, faults={"wrong_eps": {"layer": 1}}), level="mix")
    return root


def _compare(root, target, out, **options):
    section = {"target_path": str(root / target / "rank0"), "golden_path": str(root / "pt" / "rank0"),
               "formats": ["csv"]}
    section.update(options)
    return run_compare(load_config({"task": "compare", "dump_path": str(root / out), "compare": section}), None)


def test_the_two_demos_match_everywhere_with_float32_noise(dumps):
    out = _compare(dumps, "ms", "cmp", api_mapping=str(MAPPING))
    res = out.results
    matched = res["matched"].astype(bool)
    names = res["target_name"]
    assert sorted(n for n, m, s in zip(names, matched, res["step"]) if not m and s == 0) == sorted(NO_COUNTERPART)
    cells = np.array([n.startswith("Cell.") for n in names])
    assert cells.sum() > 150 and matched[cells].all()  # every layer: forward, backward, parameters, their grads
    assert {n.split(".")[0] for n in names[matched]} >= {"Cell", "MintFunctional", "Functional", "Tensor",
                                                         "Primitive"}
    assert set(res["golden_name"][matched & (res["target_name"] == "Functional.gather.0.forward.input.0")]) == \
        {"Functional.embedding.0.forward.input.1"}  # the user mapping's argument order
    assert out.summary["verdicts"]["pass"] == int(matched.sum())  # no warnings, no errors
    for col in ("max", "min", "mean", "norm"):
        t, g = res["t_" + col][matched], res["g_" + col][matched]
        finite = np.isfinite(t) & np.isfinite(g)
        assert np.array_equal(np.isfinite(t), np.isfinite(g))
        t, g = t[finite], g[finite]
        assert np.all(np.abs(t - g) <= 1e-4 * np.maximum(np.abs(g), 1e-3)), col


def test_the_built_in_mapping_alone_matches_every_cell(dumps):
    out = _compare(dumps, "ms", "cmp_builtin")
    res = out.results
    matched = res["matched"].astype(bool)
    unmatched = {n.rsplit(".", 4)[0] for n, m in zip(res["target_name"], matched) if not m}
    assert unmatched == {"Functional.gather", "Primitive.LayerNorm"}
    assert all(m for n, m in zip(res["target_name"], matched) if n.startswith("Cell."))


def test_an_op_perturbed_on_the_mindspore_side_is_ranked_first(dumps):
    out = _compare(dumps, "ms_eps", "cmp_eps", api_mapping=str(MAPPING))
    top = out.top_suspects[0]
    assert top["record"] == "Primitive.LayerNorm.2.forward"  # blocks.1.ln1, eps 1e-1 instead of 1e-5
    assert top["in_err"] < 1e-6 < 1e-2 < top["out_err"]
    assert out.summary["first_differing_op"] != top["record"]  # everything differs a little across frameworks

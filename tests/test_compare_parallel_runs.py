"""Compare across parallel layouts end to end: TP=2 runs captured under torchrun (gloo, CPU) against the same bed
run as one process (docs/COMPARE.md, "Across parallel layouts")."""

import json
from pathlib import Path

import numpy as np
import pytest

from engines.compare.engine import run_compare
from tests.dist_support import bed, losses, ok, run_single, torchrun

pytestmark = pytest.mark.slow

L0_TENSOR = {"task": "tensor", "level": "L0", "dump_path": "dump"}


def capture(folder: Path, name: str, nproc: int, fault: str = "") -> Path:
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps(dict(L0_TENSOR, target={"script": bed(name)})))
    env = {"BED_FAULT": fault} if fault else None
    args = ["-m", "probe_tui", "run", "cfg.json"]
    ok(torchrun(folder, args, nproc=nproc, env=env) if nproc > 1 else run_single(folder, args, env=env))
    return folder / "dump" / "latest"


def compare(target: Path, golden: Path, out: Path, **extra):
    section = {"target_path": str(target), "golden_path": str(golden), "output_path": str(out), "formats": ["hdf5"]}
    section.update(extra)
    return run_compare({"task": "compare", "compare": section}, None)


def test_manual_tp2_against_one_process_with_a_layout_description(tmp_path):
    golden = capture(tmp_path / "g", "merge_manual_tp", 1)
    healthy = capture(tmp_path / "t", "merge_manual_tp", 2)
    faulty = capture(tmp_path / "f", "merge_manual_tp", 2, fault="1.01")
    single, tp = losses(tmp_path / "g")[0], losses(tmp_path / "t")
    assert tp[0] == tp[1] and np.allclose(single, tp[0], rtol=1e-5)
    layout = {"ranks": 2, "tp": 2}
    out = compare(healthy, golden, tmp_path / "o1", target_layout=layout)
    s = out.summary
    assert s["errors"] == 0 and s["warnings"] == 0 and s["unmatched"] == 0 and s["golden_only_rows"] == 0, s
    assert all(x["out_err"] < 1e-5 for x in out.top_suspects)  # float noise only
    names = out.results["target_name"].tolist()
    up_out = names.index("Module.up.ColumnParallelLinear.forward.0.output.0")
    assert out.results["target_shape"][up_out] == "[4, 16]"  # the two [4, 8] shards, merged
    bad = compare(faulty, golden, tmp_path / "o2", target_layout=layout)
    top = bad.top_suspects[0]
    assert top["record"] == "Module.up.ColumnParallelLinear.forward.0" and top["rank"] == 1, bad.top_suspects[:3]
    i = bad.results["target_name"].tolist().index("Module.up.ColumnParallelLinear.forward.0.output.0")
    assert "shards against the golden: rank 0" in bad.results["reasons"][i]


def test_dtensor_tp2_against_one_process_from_the_recorded_placements(tmp_path):
    """Needs DTensor recording (the ``dist`` column filled by capture): skipped on a checkout without it."""
    faulty = capture(tmp_path / "f", "tp", 2, fault="1.01")
    from engines.dumps.opener import open_dump

    source = open_dump(faulty)
    dist = source._reader(0).tensors(step=0, columns=["dist"])["dist"]
    source.close()
    if not any(dist.tolist()):
        pytest.skip("this checkout's capture records no DTensor placements (tensors.dist)")
    golden = capture(tmp_path / "g", "tp", 1)
    healthy = capture(tmp_path / "t", "tp", 2)
    out = compare(healthy, golden, tmp_path / "o1")
    s = out.summary
    assert s["errors"] == 0 and s["warnings"] == 0, s["verdicts"]
    assert any("target ranks merged" in n and "recorded placements" in n for n in s["notes"]), s["notes"]
    assert all(x["out_err"] < 1e-5 for x in out.top_suspects)
    bad = compare(faulty, golden, tmp_path / "o2")
    top = bad.top_suspects[0]
    assert top["record"] == "Module.up.Linear.forward.0" and top["rank"] == 1, bad.top_suspects[:3]


def test_pp2_micro_batches_against_one_process(tmp_path):
    """The pipeline bed (2 stages, GPipe over 2 micro-batches) against its unsplit run on the whole batch: the
    stages stitch and the micro-batches merge into the whole-batch calls. Step 1: step 0 holds the schedule's
    shape inference too. Needs tests/dist_beds/pp.py (the test beds' branch): skipped without it."""
    if not Path(bed("pp")).is_file():
        pytest.skip("tests/dist_beds/pp.py is not in this checkout")
    golden = capture(tmp_path / "g", "pp", 1)
    target = capture(tmp_path / "t", "pp", 2)
    out = compare(target, golden, tmp_path / "o", target_layout={"ranks": 2, "pp": 2}, step=[1])
    assert any("2 micro-batches a golden call" in n for n in out.summary["notes"]), out.summary["notes"]
    r = out.results
    forward = [i for i, n in enumerate(r["target_name"].tolist()) if ".forward." in n]
    names = [r["target_name"][i] for i in forward]
    assert "Module.up.Linear.forward.0.output.0" in names and "Module.down.Linear.forward.0.output.0" in names
    assert all(r["matched"][i] and r["rel_err"][i] < 1e-5 for i in forward), [
        (r["target_name"][i], r["target_shape"][i], r["rel_err"][i]) for i in forward]
    assert r["target_shape"][r["target_name"].tolist().index("Module.up.Linear.forward.0.input.0")] == "[4, 8]"

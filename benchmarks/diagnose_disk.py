"""What diagnose's stage 2 writes against a full tensor dump, on the tiny demo and on a small GPT-2.

    PYTHONPATH=. python benchmarks/diagnose_disk.py [OUT]

Prints, per workload, the verdict, which stage decided, the stage-2 disk (bytes on disk of the two tensor runs)
and the estimated full tensor dump of the stage-1 steps (both sides), and the ratio. docs/DIAGNOSE.md quotes it.
"""

import json
import sys
import tempfile
import time
from pathlib import Path

from engines.runner import run_job
from schemas import load_config

HERE = Path(__file__).resolve().parent
GPT2 = str(HERE / "diagnose_gpt2_target.py")

WORKLOADS = {
    "demo tiny, lowp_softmax": (
        {"target": {"demo": {"preset": "tiny", "steps": 1, "faults": {"lowp_softmax": {"layer": 1}}}}},
        {"target": {"demo": {"preset": "tiny", "steps": 1}}}),
    "demo default preset, lowp_softmax": (
        {"target": {"demo": {"preset": "default", "steps": 1, "faults": {"lowp_softmax": {"layer": 1}}}}},
        {"target": {"demo": {"preset": "default", "steps": 1}}}),
    "GPT-2 (4 layers, 128 wide, seq 64, batch 4), wrong eps in block 2": (
        {"target": {"script": GPT2, "args": ["--wrong-eps", "2", "--steps", "1"]}},
        {"target": {"script": GPT2, "args": ["--steps", "1"]}}),
}


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="diagnose_disk_"))
    for i, (name, (target, golden)) in enumerate(WORKLOADS.items()):
        out = root / "w{}".format(i)
        job = load_config({"task": "diagnose", "diagnose": {"target": target, "golden": golden,
                                                           "output_path": str(out)}})
        started = time.time()
        run_job(job)
        v = json.loads((out / "verdict.json").read_text())
        d = v["disk"]
        print("{}: {} {} ({}; stage 2 {}), {:.0f} s".format(
            name, v["verdict"], (v.get("culprit") or {}).get("op", ""), v["decided_by"], v["stage2_outcome"],
            time.time() - started))
        print("  stage 2 wrote {:,} B on disk ({:,} B of data); full tensor dump of the stage-1 step, both sides: "
              "{:,} B; ratio {:.2%} (data {:.2%})".format(
                  d["stage2_disk_bytes"], d["stage2_data_bytes"], d["full_dump_bytes"],
                  d["fraction_of_full_dump"] or 0, d["data_fraction_of_full_dump"] or 0))


if __name__ == "__main__":
    main()

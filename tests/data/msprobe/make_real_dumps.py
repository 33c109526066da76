"""Produce the real msprobe dumps in ``real/`` with mindstudio-probe 26.2.0 (docs/decisions/0023-msprobe-as-an-oracle.md: msprobe as an oracle).

Run in a separate environment that has msprobe (it is never a dependency of probe-tui):

    python -m venv msvenv && msvenv/bin/pip install mindstudio-probe==26.2.0 torch==2.13.0 pandas
    msvenv/bin/python tests/data/msprobe/make_real_dumps.py

The model is :func:`tiny_model` (also used by the tests to capture the same steps with probe-tui); one step of
SGD on fixed data, torch 1 thread, deterministic.
"""

import json
import shutil
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent / "real"


def tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(2, 4, generator=g), torch.tensor([0, 2])


def step(model, x, y, scale=1.0):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(x) * scale
    loss = torch.nn.functional.cross_entropy(torch.softmax(out, dim=-1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def dump(name, task, level, summary_mode="statistics", scale=1.0):
    from msprobe.pytorch import PrecisionDebugger

    out = HERE / name
    shutil.rmtree(out, ignore_errors=True)
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        section["summary_mode"] = summary_mode
    cfg = {"task": task, "dump_path": str(out), "rank": [], "step": [], "level": level, "seed": 1234,
           "is_deterministic": True, task: section}
    cfg_path = HERE / "config_{}.json".format(name)
    cfg_path.write_text(json.dumps(cfg))
    torch.set_num_threads(1)
    model = tiny_model()
    x, y = batch()
    debugger = PrecisionDebugger(config_path=str(cfg_path))
    debugger.start(model)
    step(model, x, y, scale)
    debugger.stop()
    debugger.step()
    cfg_path.unlink()


DUMPS = {"tensor_mix": ("tensor", "mix", "statistics", 1.0),
         "stats_md5_mix": ("statistics", "mix", "md5", 1.0),
         "stats_l1_scaled": ("statistics", "L1", "statistics", 1.01)}


if __name__ == "__main__":
    if len(sys.argv) == 2:
        task, level, summary, scale = DUMPS[sys.argv[1]]
        dump(sys.argv[1], task, level, summary_mode=summary, scale=scale)
    else:  # msprobe's debugger is a process-wide singleton: one process per dump
        import subprocess

        for name in DUMPS:
            subprocess.run([sys.executable, __file__, name], check=True)

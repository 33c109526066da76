"""What probe-tui writes on disk, and where it refuses to write (docs/SECURITY.md "Files probe-tui writes").

- Modes are exact whatever the umask: every file 0o640, every folder 0o750 (real jobs on the demo, run under
  umask 000 in a subprocess).
- Nothing is written through a symbolic link planted where probe-tui creates something: a planted file link,
  rank-folder link or run-folder link is refused and its target outside stays untouched.
- Bad dump_path values (a link loop, a NUL byte, an over-long component, a folder that cannot hold one) are one
  line and exit 2, with nothing half-written.
"""

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engines import safe_fs
from engines.runs import RunError, create_run

ROOT = Path(__file__).resolve().parents[1]
TINY = {"demo": {"preset": "tiny", "steps": 2, "dtype": "fp32"}}


def _env():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PROBE_TUI_RUN_ID", None)
    return env


def _cli(args, cwd, umask=None, timeout=300):
    code = "import sys\nfrom probe_tui.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec)


def _write(path: Path, config: dict) -> Path:
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _modes(root: Path):
    """(path, mode) of every file and folder under root (links skipped: their own mode means nothing)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode):
                out.append((p, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode)))
    return out


# -- umask 000 ---------------------------------------------------------------------------------------------------
DRIVER = textwrap.dedent("""
    import json, os, sys
    os.umask(0)
    from probe_tui.cli import main
    codes = {}
    for name, argv in json.loads(sys.argv[1]):
        codes[name] = main(argv)
    print(json.dumps(codes))
""")


def test_every_output_of_real_jobs_is_0o640_or_0o750_under_umask_000(tmp_path):
    """Statistics, tensor, overflow_check + analyze-overflow, monitor (hdf5, csv, tensorboard, alerts),
    grad_probe + grad_compare (CSVs, charts), compare (hdf5, csv, xlsx), parse --export-npy, init, all in one
    process under umask 000 (failed before: run folders 777, run.json and dump.h5 666, segments.jsonl 644)."""
    out = tmp_path / "out"
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    dump = str(out / "dump")
    jobs = []

    def job(name, config):
        jobs.append((name, ["run", str(_write(cfg / f"{name}.json", config))]))

    job("statistics", {"task": "statistics", "dump_path": dump + "/stats", "target": TINY, "level": "L1"})
    job("tensor", {"task": "tensor", "dump_path": dump + "/tensor", "target": TINY, "level": "L1",
                   "tensor": {"list": ["linear"], "data_mode": ["forward"]}})
    job("overflow_check", {"task": "overflow_check", "dump_path": dump + "/overflow", "level": "L1",
                           "target": {"demo": {"preset": "tiny", "steps": 3, "dtype": "fp16",
                                               "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}}},
                           "overflow_check": {"overflow_nums": 1}})
    job("monitor", {"task": "monitor", "dump_path": dump + "/monitor",
                    "target": {"demo": {"preset": "tiny", "steps": 4,
                                        "faults": {"grad_explosion": {"step": 2, "layer": 1, "scale": 1e4}}}},
                    "monitor": {"wg_distribution": True, "xy_distribution": True, "ops": ["norm", "nans"],
                                "format": ["hdf5", "csv", "tensorboard"],
                                "alert": {"rules": [{"rule_name": "AnomalyTurbulence",
                                                     "args": {"threshold": 1.0}}], "dump": True}}})
    job("grad_probe", {"task": "grad_probe", "dump_path": dump + "/grad", "target": TINY,
                       "grad_probe": {"grad_level": "L2", "bounds": [-0.01, 0, 0.01]}})
    job("compare", {"task": "compare", "dump_path": dump + "/compare",
                    "compare": {"target_path": dump + "/stats/latest", "golden_path": dump + "/stats/latest",
                                "formats": ["hdf5", "csv", "xlsx"]}})
    job("analyze_overflow", {"task": "analyze_overflow", "dump_path": dump + "/analyze",
                             "analyze_overflow": {"path": dump + "/overflow/latest"}})
    job("grad_compare", {"task": "grad_compare", "dump_path": dump + "/grad_compare",
                         "grad_compare": {"target_path": dump + "/grad/latest", "golden_path": dump + "/grad/latest",
                                          "plots": True}})
    jobs.append(("export_npy", ["parse", dump + "/tensor/latest", "--export-npy", str(out / "npy" / "x")]))
    jobs.append(("init", ["init", "statistics", "-o", str(out / "init.json")]))
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(jobs)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert codes == {name: 0 for name, _ in jobs}, proc.stderr[-3000:]

    written = _modes(out)
    names = {p.name for p, _, _ in written}
    suffixes = {p.suffix for p, _, _ in written}
    # every kind of output was written, so the mode check below covers them all
    assert {"run.json", "segments.jsonl", "dump.h5", "anomalies.jsonl", "summary.json", "init.json"} <= names
    assert {".h5", ".csv", ".xlsx", ".png", ".npy", ".jsonl"} <= suffixes
    assert any(n.startswith("events.out.tfevents") for n in names)
    bad = [f"{p.relative_to(out)} {oct(mode)}" for p, mode, is_dir in written
           if mode != (safe_fs.DIR_MODE if is_dir else safe_fs.FILE_MODE)]
    assert bad == []


def test_modes_are_exact_under_a_strict_umask_too(tmp_path):
    """The modes are set, not masked: umask 077 does not make folders 0o700 (group members read runs)."""
    config = _write(tmp_path / "s.json", {"task": "statistics", "dump_path": str(tmp_path / "d"),
                                          "target": {"demo": {"preset": "tiny", "steps": 1}}, "level": "L1"})
    proc = _cli(["run", str(config)], tmp_path, umask=0o077)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modes = {mode for _, mode, _ in _modes(tmp_path / "d")}
    assert modes == {safe_fs.FILE_MODE, safe_fs.DIR_MODE}

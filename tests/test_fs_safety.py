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

from engines.runs import RunError, create_run

FILE_MODE, DIR_MODE = 0o640, 0o750
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
           if mode != (DIR_MODE if is_dir else FILE_MODE)]
    assert bad == []


def test_modes_are_exact_under_a_strict_umask_too(tmp_path):
    """The modes are set, not masked: umask 077 does not make folders 0o700 (group members read runs)."""
    config = _write(tmp_path / "s.json", {"task": "statistics", "dump_path": str(tmp_path / "d"),
                                          "target": {"demo": {"preset": "tiny", "steps": 1}}, "level": "L1"})
    proc = _cli(["run", str(config)], tmp_path, umask=0o077)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modes = {mode for _, mode, _ in _modes(tmp_path / "d")}
    assert modes == {FILE_MODE, DIR_MODE}


# -- planted links -----------------------------------------------------------------------------------------------
def _shared_run(tmp_path, plant):
    """A run with a known shared run-id (as every rank of a launch has) into a dump_path where ``plant(run_dir)``
    put links first; returns (process, outside folder)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched\n")
    dump = tmp_path / "dump"
    dump.mkdir()
    plant(dump / "RID", outside)
    config = _write(tmp_path / "s.json", {"task": "statistics", "dump_path": str(dump),
                                          "target": {"demo": {"preset": "tiny", "steps": 1}}, "level": "L1"})
    env = dict(_env(), PROBE_TUI_RUN_ID="RID")
    proc = subprocess.run([sys.executable, "-m", "probe_tui", "run", str(config)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc, outside


def _outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "untouched\n"


def test_a_planted_segments_jsonl_link_is_refused_and_its_target_untouched(tmp_path):
    """Failed before: the store appended its 'open' and 'close' lines to the link's target."""
    def plant(run_dir, outside):
        (run_dir / "rank0").mkdir(parents=True)
        (run_dir / "rank0" / "segments.jsonl").symlink_to(outside / "victim.txt")

    proc, outside = _shared_run(tmp_path, plant)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the dump stops, training finishes
    assert "Traceback" not in proc.stderr
    refused = [line for line in proc.stderr.splitlines() if "segments.jsonl: is a symbolic link" in line]
    assert len(refused) == 1, proc.stderr[-2000:]
    _outside_untouched(outside)
    assert not list((tmp_path / "dump" / "RID" / "rank0").glob("*.h5"))  # nothing half-made beside the link


def test_a_planted_rank_folder_link_is_refused_and_its_target_untouched(tmp_path):
    """Failed before: the rank folder link was followed and the whole store written into its target."""
    def plant(run_dir, outside):
        run_dir.mkdir()
        (run_dir / "rank0").symlink_to(outside, target_is_directory=True)

    proc, outside = _shared_run(tmp_path, plant)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert sum("rank0: is a symbolic link" in line for line in proc.stderr.splitlines()) == 1, proc.stderr[-2000:]
    _outside_untouched(outside)


def test_a_planted_run_folder_link_is_one_line_exit_2_and_its_target_untouched(tmp_path):
    """Failed before: the run folder link was followed: run.json, rank0/ and the store went into its target."""
    def plant(run_dir, outside):
        run_dir.symlink_to(outside, target_is_directory=True)

    proc, outside = _shared_run(tmp_path, plant)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "RID: is a symbolic link" in lines[0] and "dump_path" in lines[0], lines
    _outside_untouched(outside)


def test_a_run_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    """A folder someone else made under a shared dump_path (with the run-id a launch will use) is not joined."""
    monkeypatch.setenv("PROBE_TUI_RUN_ID", "RID")
    (tmp_path / "RID").mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # as if another user had made it
    with pytest.raises(RunError, match="RID: belongs to another user"):
        create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert not (tmp_path / "RID" / "run.json").exists()


def test_a_planted_latest_link_is_replaced_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched\n")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "latest").symlink_to(outside / "victim.txt")
    run = create_run(dump, task="statistics", config={}, framework="pytorch")
    assert os.readlink(dump / "latest") == run.run_id
    _outside_untouched(outside)


def test_dump_path_itself_may_be_a_link_to_the_users_folder(tmp_path):
    """A user's scratch link as dump_path is followed: the user named it (docs/SECURITY.md)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "dumps").symlink_to(scratch, target_is_directory=True)
    run = create_run(tmp_path / "dumps", task="statistics", config={}, framework="pytorch")
    assert (scratch / run.run_id / "run.json").is_file()


def test_a_link_planted_mid_run_stops_the_store_with_one_line(tmp_path):
    """Failed before: the next per-step commit announced its segment into the link's target."""
    from engines.store import Column, StoreWriter, TableSpec

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched\n")
    rank = tmp_path / "rank0"
    table = TableSpec("t", (Column("x", "int64"),))
    writer = StoreWriter(rank, "dump", (table,), mode="per_step")
    stops = []
    writer.on_stop = lambda reason, message: stops.append((reason, message))
    writer.append("t", x=[1])
    writer.commit(0)
    (rank / "segments.jsonl").unlink()
    (rank / "segments.jsonl").symlink_to(outside / "victim.txt")
    writer.append("t", x=[2])
    writer.commit(1)  # the store stops (training goes on); it never writes through the link
    assert len(stops) == 1 and stops[0][0] == "write_failed"
    assert "segments.jsonl: is a symbolic link" in stops[0][1] and "\n" not in stops[0][1]
    writer.append("t", x=[3])
    writer.commit(2)
    writer.close()
    assert len(stops) == 1
    _outside_untouched(outside)


@pytest.mark.parametrize("kind", ["file link", "dangling link", "fifo"])
def test_appends_and_new_files_never_go_through_a_planted_path(tmp_path, kind):
    """The writers' primitives: an append refuses, a new file refuses, an atomic write replaces the link."""
    from engines import safe_fs

    target = tmp_path / "victim.txt"
    target.write_text("untouched\n")
    planted = tmp_path / "planted"
    if kind == "file link":
        planted.symlink_to(target)
    elif kind == "dangling link":
        planted.symlink_to(tmp_path / "created-through-the-link")
    else:
        os.mkfifo(planted)
    with pytest.raises(safe_fs.UnsafePathError):
        safe_fs.append_file(planted)
    with pytest.raises(FileExistsError):
        safe_fs.create_file(planted)
    safe_fs.write_atomic(planted, "ours\n")
    assert planted.read_text() == "ours\n" and not planted.is_symlink()
    assert target.read_text() == "untouched\n"
    assert not (tmp_path / "created-through-the-link").exists()


# -- bad dump_path values ----------------------------------------------------------------------------------------
def test_a_dump_path_link_loop_is_named_as_one_exit_2(tmp_path):
    """Failed before: reported as "[Errno 17] File exists"."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(RunError) as err:
        create_run(tmp_path / "a", task="statistics", config={}, framework="pytorch")
    assert str(err.value) == f"dump_path: cannot create {tmp_path / 'a'}: a symbolic link loop (too many levels " \
                             "of symbolic links)"
    config = _write(tmp_path / "s.json", {"task": "statistics", "dump_path": str(tmp_path / "a" / "sub"),
                                          "target": "demo"})
    proc = _cli(["run", str(config)], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "symbolic link loop" in proc.stderr, proc.stderr


@pytest.mark.parametrize("bad, words", [
    ("run\x00s", "contains a NUL byte"),
    ("runs/" + "x" * 256, "a component of 256 bytes"),
    ("r/" * 2100, "4200 bytes long"),
], ids=["nul", "long-component", "long-path"])
def test_validate_refuses_a_dump_path_no_file_system_takes(tmp_path, bad, words):
    """Failed before: validate accepted these and the run crashed with a traceback."""
    config = _write(tmp_path / "s.json", {"task": "statistics", "dump_path": bad, "target": "demo"})
    for argv in (["validate", str(config)], ["run", str(config)]):
        proc = _cli(argv, tmp_path)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "dump_path" in lines[0] and words in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


@pytest.mark.parametrize("where", ["/proc/self/probe", "/proc/self"])
def test_a_dump_path_that_cannot_hold_folders_is_one_line_exit_2(tmp_path, where):
    """Failed before: /proc/self passed validation and the run crashed with a traceback."""
    config = _write(tmp_path / "s.json", {"task": "statistics", "dump_path": where, "target": "demo"})
    proc = _cli(["run", str(config)], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "dump_path" in lines[0] and where in lines[0], lines


def test_a_failing_dump_path_leaves_no_folder_half_made(tmp_path, monkeypatch):
    """The parents made for a dump_path whose last folder cannot be made are removed again."""
    deep = tmp_path / "new" / "deeper" / "leaf"
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if os.path.basename(path) == "leaf":
            raise PermissionError(13, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(RunError, match="^dump_path: cannot create .*leaf: Permission denied$"):
        create_run(deep, task="statistics", config={}, framework="pytorch")
    assert list(tmp_path.iterdir()) == []

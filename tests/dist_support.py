"""Launch a test-bed script under torchrun (gloo, CPU) for the distributed tests.

Every launch gets its own free port, a clean launcher environment (the suite itself may run under one), one math
thread per process and a timeout. The beds in ``tests/dist_beds/`` write each rank's per-step losses to
``losses_rank<R>.json`` in their working folder, so a test can check that capture left the numbers bit-identical.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
BEDS = Path(__file__).resolve().parent / "dist_beds"

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
               "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_STEP_ID",
               "SLURM_NTASKS", "PROBE_TUI_RUN_ID", "PROBE_TUI_RANKS", "GROUP_RANK", "LOCAL_WORLD_SIZE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.update(extra or {})
    return env


def torchrun(cwd: Path, args: Sequence[str], nproc: int = 2, *, env: Optional[Dict[str, str]] = None,
             launcher_args: Sequence[str] = (), timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node=N ... ARGS`` in ``cwd``; stdin closed, output captured.

    ``args`` is what follows the launcher's options: ``["bed.py"]`` for a plain run, ``["-m", "probe_tui", "run",
    "cfg.json"]`` for a probe-tui job (``run CONFIG`` is ``--run CONFIG`` in a form torchrun leaves alone)."""
    own_port = not any(a.startswith(("--master_port", "--rdzv")) for a in launcher_args)
    before = set(cwd.iterdir())
    for attempt in (1, 2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=%d" % nproc]
        if own_port:
            cmd.append("--master_port=%d" % free_port())
        cmd += list(launcher_args) + list(args)
        try:
            proc = run_group(cmd, cwd, env, timeout)
        except subprocess.TimeoutExpired:
            # seen once in CI: a plain DDP bed's rendezvous never completed (no output in 300 s; a port taken
            # between free_port() and the launcher's bind is the likely cause); one more launch on a new port
            if attempt == 2 or not own_port:
                raise
            _forget_launch(cwd, before)
            continue
        if attempt == 1 and torch_teardown_abort(proc):
            _forget_launch(cwd, before)
            continue
        return proc
    raise AssertionError("unreachable")


TEARDOWN_ABORT = b"terminate called without an active exception"


def torch_teardown_abort(proc: subprocess.CompletedProcess) -> bool:
    """A worker aborted by the C++ runtime with no exception in flight (a ``std::thread`` destroyed while still
    joinable: a gloo worker thread at process teardown). Seen once in CI on a *plain* FSDP2 bed (no probe-tui in
    the process), so it is torch's, not ours: the launch is run once more. A Python traceback beside it means the
    abort followed a real failure, which is never retried."""
    if proc.returncode == 0 or TEARDOWN_ABORT not in proc.stderr:
        return False
    return b"Traceback (most recent call last)" not in proc.stderr.split(TEARDOWN_ABORT)[0]


def _forget_launch(cwd: Path, before: "set[Path]") -> None:
    """Remove what a failed launch left in ``cwd`` (dump folders, loss files) so the next launch starts as the
    first did."""
    for path in set(cwd.iterdir()) - before:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def run_group(cmd: Sequence[str], cwd: Path, env: Optional[Dict[str, str]], timeout: float
              ) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a session of its own. torchrun starts each worker in a session of its own too, so a worker
    that outlives the launcher (the launcher died or gave up on it) is in no group we can kill and still holds the
    output pipes: every process of the launch carries a marker in its environment, and on timeout the launcher's
    group and every marked process are killed, then the timeout is raised (never a wait on a pipe an orphan
    holds). Marked processes still alive after a normal end are killed too."""
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=clean_env(dict(env or {}, PROBE_TUI_TEST_LAUNCH=marker)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_launch(proc.pid, marker)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        raise
    _kill_launch(None, marker)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def _kill_launch(group: Optional[int], marker: str) -> None:
    """SIGKILL the launcher's process group and every process whose environment holds ``marker``."""
    if group is not None:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    needle = ("PROBE_TUI_TEST_LAUNCH=" + marker).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def run_single(cwd: Path, args: Sequence[str], *, env: Optional[Dict[str, str]] = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """The same bed as one plain process (world size 1: the reference run of a parallel layout)."""
    return run_group([sys.executable] + list(args), cwd, env, timeout)


def bed(name: str) -> str:
    """Path of a test-bed script, for ``target.script`` or the command line."""
    return str(BEDS / ("%s.py" % name))


def losses(folder: Path) -> Dict[int, List[float]]:
    """Each rank's per-step losses as the bed wrote them (exact floats: JSON keeps float64 round-trips)."""
    out = {}
    for path in sorted(folder.glob("losses_rank*.json")):
        out[int(path.stem[len("losses_rank"):])] = json.loads(path.read_text())
    return out


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (proc.stdout.decode()[-2000:], proc.stderr.decode()[-4000:])
    return proc

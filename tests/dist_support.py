"""Launch a test-bed script under torchrun (gloo, CPU) for the distributed tests.

Every launch gets its own free port, a clean launcher environment (the suite itself may run under one), one math
thread per process and a timeout. The beds in ``tests/dist_beds/`` write each rank's per-step losses to
``losses_rank<R>.json`` in their working folder, so a test can check that capture left the numbers bit-identical.
"""

import json
import os
import signal
import socket
import subprocess
import sys
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
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=%d" % nproc]
    if not any(a.startswith(("--master_port", "--rdzv")) for a in launcher_args):
        cmd.append("--master_port=%d" % free_port())
    cmd += list(launcher_args) + list(args)
    return run_group(cmd, cwd, env, timeout)


def run_group(cmd: Sequence[str], cwd: Path, env: Optional[Dict[str, str]], timeout: float
              ) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a session of its own; on timeout the whole process group is killed (a launcher killed alone
    leaves its workers running, orphaned), then the timeout is raised."""
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=clean_env(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


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

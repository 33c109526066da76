"""The torchrun harness never hangs on a worker that outlives its launcher (tests/dist_support.py)."""

import os
import subprocess
import sys
import threading
import time

from dist_support import run_group, torchrun


def test_a_worker_outliving_its_launcher_is_killed_not_waited_for(tmp_path):
    # torchrun starts each worker in a session of its own; a launcher that exits before its worker leaves the
    # worker holding the output pipes (seen in CI: a DDP bed's rank 0 kept a test waiting forever)
    pid_file = tmp_path / "orphan.pid"
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        "open(%r, 'w').write(str(p.pid))\n" % str(pid_file))
    outcome = {}

    def launch():
        try:
            run_group([sys.executable, str(launcher)], tmp_path, None, timeout=3)
        except subprocess.TimeoutExpired:
            outcome["timeout"] = True

    waiter = threading.Thread(target=launch, daemon=True)
    waiter.start()
    waiter.join(90)
    assert not waiter.is_alive(), "the harness waited on a pipe the orphaned worker holds"
    assert outcome.get("timeout")
    orphan = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(orphan, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the orphaned worker is still running")


def test_a_worker_aborted_at_teardown_is_launched_once_more(tmp_path):
    # seen in CI: a plain FSDP2 bed (no probe-tui) died with SIGABRT, "terminate called without an active
    # exception", after its last step: torch's gloo teardown, retried once, the first launch's files removed
    marker = tmp_path / "launched-once"
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "bed.py"
    script.write_text(
        "import os, sys\n"
        "open('losses_rank0.json', 'w').write('[1.0]')\n"
        "if not os.path.exists(%r):\n"
        "    open(%r, 'w').close()\n"
        "    os.makedirs('dump/run1')\n"
        "    sys.stderr.write('terminate called without an active exception\\n'); sys.stderr.flush()\n"
        "    os.abort()\n" % (str(marker), str(marker)))
    proc = torchrun(work, [str(script)], nproc=1, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert marker.exists()
    assert sorted(p.name for p in work.iterdir()) == ["losses_rank0.json"]  # the aborted launch's dump is gone


def test_an_abort_after_a_python_traceback_is_not_retried(tmp_path):
    script = tmp_path / "bed.py"
    script.write_text(
        "import os, sys, traceback\n"
        "open('count', 'a').write('x')\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()\n"
        "sys.stderr.write('terminate called without an active exception\\n'); sys.stderr.flush()\n"
        "os.abort()\n")
    proc = torchrun(tmp_path, [str(script)], nproc=1, timeout=120)
    assert proc.returncode != 0
    assert (tmp_path / "count").read_text() == "x"

"""The torchrun harness never hangs on a worker that outlives its launcher (tests/dist_support.py)."""

import os
import subprocess
import sys
import threading
import time

from dist_support import run_group


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

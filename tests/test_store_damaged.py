"""A damaged store file (a truncated dump.h5, as a full disk leaves it) is a one-line error with exit code 2 from
parse and compare, at once: a file its writer closed is read without SWMR, whose reader would retry the broken
metadata with growing sleeps instead of failing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_compare_probe_dumps import model, write_ours

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def damaged(tmp_path):
    good = write_ours(tmp_path / "good" / "rank0", model(), tensors=False).parent
    bad = write_ours(tmp_path / "bad" / "rank0", model(), tensors=False)
    h5 = bad / "dump.h5"
    assert h5.is_file()
    with open(h5, "r+b") as fh:
        fh.truncate(h5.stat().st_size // 2)
    return bad.parent, good


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "probe_tui", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["parse", "compare"])
def test_a_truncated_store_is_a_one_line_error(damaged, tmp_path, command):
    bad, good = damaged
    args = (bad,) if command == "parse" else (bad, good)
    done = _cli(command, *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "dump.h5" in lines[0] and "Traceback" not in done.stderr, done.stderr

#!/usr/bin/env bash
# Create (or reuse) .venv and install probe-tui with everything the tests need.
# Idempotent: a second run only checks. torch and numpy are pinned by constraints-dev.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.probe-tui-installed
want=$(cat pyproject.toml constraints-dev.txt | sha1sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    python -m pip install -q --no-cache-dir --upgrade pip
    python -m pip install -q --no-cache-dir -c constraints-dev.txt -e ".[torch,mindspore,dev,report]"
    echo "$want" > "$stamp"
fi
# The native statistics kernel and its CPython fast path (docs/decisions/0028-fused-statistics.md): built ahead
# into the per-user cache so the first capture does not compile them; a machine without a C compiler keeps torch's
# reductions, one without Python's headers the kernel's ctypes calls.
python -c "from engines.native import build; build.load() or print('setup: native statistics kernel not built (torch reductions)')"
python -c "from engines.native import fastpath; fastpath.module() or print('setup: native fast path not built (ctypes calls)')"

#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m pytest -n 2 "$@"

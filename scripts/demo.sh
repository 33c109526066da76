#!/usr/bin/env bash
# Set up (if needed) and run the main job on the built-in demo model:
# a statistics dump of a small GPT trained for a few steps on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec probe-tui --run sample_configs/statistics.json "$@"

#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. This is what CI runs.
# ruff first (a lint error fails the run in a second), then the type checker on schemas/ and engines/ ([tool.mypy]
# in pyproject.toml; its cache stays outside the repo); the import-linter contracts in pyproject.toml, the engines/
# cycle check included, run inside pytest (tests/test_layering.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m ruff check --no-cache .
python -m mypy
exec python -m pytest -n 2 "$@"

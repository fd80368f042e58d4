#!/usr/bin/env bash
# Install, lint, type-check, and run the whole test suite (unit, simulation, integration).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check --no-cache kudu_async tests scripts
.venv/bin/ruff format --check --no-cache kudu_async tests scripts
.venv/bin/mypy
# Two workers, each taking whole files (a module's shared cluster stays in one worker).
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile "$@"

#!/usr/bin/env bash
# The main job: install, then start a local cluster (1 master + 3 tablet servers) until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/local_cluster.py "$@"

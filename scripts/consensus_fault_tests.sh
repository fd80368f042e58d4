#!/usr/bin/env bash
# The long versions of the real-process consensus fault tests (10,000 puts, 20 kill -9 rounds, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
KUDU_LONG_TESTS=1 exec .venv/bin/python -m pytest -q -p no:cacheprovider -s tests/integration/test_consensus_cluster.py "$@"

#!/usr/bin/env bash
# The main job: install, start a local cluster (1 master + 3 tablet servers on 127.0.0.1) and run the Spark
# demo pipeline against it (scripts/pipeline.py: ingest, corrections, streaming, SQL analytics, results).
# Extra arguments go to the pipeline (e.g. --events 1000000). scripts/local_cluster.py keeps a cluster up.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/pipeline.py "$@"

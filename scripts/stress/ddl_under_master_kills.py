#!/usr/bin/env python3
"""DDL in a loop while the leader master is killed every few seconds (3 masters + 3 tservers).

Workers run CreateTable / AlterTable (add column, rename) / DeleteTable, each under a request id retried
across masters; the leader master gets kill -9 every --kill-every seconds and is restarted. At the end the
cluster is checked against what the workers were told (see kudu_async/testing/ddl_stress.py) and the
figures are printed: DDL attempted / acknowledged / retried, failovers, the longest time without a leader.
Exit status 1 if anything acknowledged was lost or applied twice.

    .venv/bin/python scripts/stress/ddl_under_master_kills.py --duration 300 --workers 4
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kudu_async.testing import MiniCluster
from kudu_async.testing.ddl_stress import DdlStressConfig, run_ddl_stress


def _range(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(",")
    a, b = float(lo), float(hi or lo)
    if not 0 < a <= b:
        raise argparse.ArgumentTypeError(f"expected 'LOW,HIGH' seconds with 0 < LOW <= HIGH, got {text!r}")
    return a, b


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of DDL under kills (default 60)")
    p.add_argument("--workers", type=int, default=3, help="concurrent DDL clients (default 3)")
    p.add_argument("--tables-per-worker", type=int, default=3, help="live tables per worker at most (default 3)")
    p.add_argument("--hash-buckets", type=int, default=2, help="tablets per table (default 2)")
    p.add_argument(
        "--kill-every",
        type=_range,
        default=(3.0, 5.0),
        metavar="LOW,HIGH",
        help="seconds between leader kills, drawn uniformly (default 3,5)",
    )
    p.add_argument(
        "--random-kills",
        action="store_true",
        help="kill at random moments instead of aiming each kill at a DDL in flight",
    )
    p.add_argument(
        "--restart-after",
        type=_range,
        default=(0.3, 1.0),
        metavar="LOW,HIGH",
        help="seconds before a killed master is started again (default 0.3,1)",
    )
    p.add_argument("--ddl-timeout", type=float, default=30.0, help="deadline of one DDL's retries (default 30)")
    p.add_argument(
        "--resend-probability",
        type=float,
        default=0.15,
        help="per step, resend an acknowledged DDL under its request id (default 0.15)",
    )
    p.add_argument(
        "--settle-timeout",
        type=float,
        default=180.0,
        help="seconds allowed for the final state after the run (default 180)",
    )
    p.add_argument(
        "--raft-heartbeat-ms",
        type=int,
        default=500,
        help="masters' Raft heartbeat; elections start after 3 missed (default 500, Kudu's)",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    p.add_argument("--base-dir", default=None, help="where the cluster lives (default: a temp dir)")
    args = p.parse_args()
    if args.duration <= 0 or args.workers < 1 or args.tables_per_worker < 1 or args.hash_buckets < 1:
        p.error("--duration, --workers, --tables-per-worker and --hash-buckets must be positive")

    base = Path(args.base_dir) if args.base_dir else Path(tempfile.mkdtemp(prefix="ddl-stress-"))
    config = DdlStressConfig(
        duration_s=args.duration,
        workers=args.workers,
        tables_per_worker=args.tables_per_worker,
        hash_buckets=args.hash_buckets,
        kill_every_s=args.kill_every,
        restart_after_s=args.restart_after,
        aim_kills_at_ddl=not args.random_kills,
        ddl_timeout_s=args.ddl_timeout,
        resend_probability=args.resend_probability,
        settle_timeout_s=args.settle_timeout,
        seed=args.seed,
    )
    cluster = MiniCluster(
        num_masters=3,
        num_tservers=3,
        base_dir=base,
        master_flags=["--raft-heartbeat-interval-ms", str(args.raft_heartbeat_ms)],
    )
    t0 = time.monotonic()
    cluster.start()
    print(f"cluster up in {time.monotonic() - t0:.1f}s at {base}", flush=True)
    try:
        report = asyncio.run(run_ddl_stress(cluster, config, progress=lambda m: print(m, flush=True)))
    finally:
        cluster.shutdown()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    for line in report.lines():
        print(line)
    if args.keep:
        print(f"data and logs kept in {base}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Start a local kudu_async cluster (1 master + 3 tablet servers on 127.0.0.1 by default) and keep it up.

Prints every node's RPC and HTTP address; Ctrl-C (or SIGTERM) stops the nodes cleanly. Data lives in
the directory given by --data-dir (default ./local-cluster), so a restart keeps the nodes' identities.
``--masters 3`` starts three masters. The nodes' command lines are kept in <data-dir>/cluster.json, which
``scripts/rolling_restart.py --manifest`` reads to restart the running cluster one node at a time.

``--secure`` starts it as production runs: TLS required with the cluster's own CA, authentication
required (JWTs checked against a JWKS made here), a table privilege policy enforced on every write and
scan (``alice`` holds ALL on every table; ``admin`` is the superuser). It writes ``ca.pem`` (the CA to
trust), ``alice.jwt`` and ``admin.jwt`` (valid for a day) into the data directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kudu_async.testing import MiniCluster, MiniClusterError


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="local-cluster", help="cluster data directory [./local-cluster]")
    ap.add_argument("--masters", type=int, default=1, choices=(1, 3, 5), help="number of masters [1]")
    ap.add_argument("--tservers", type=int, default=3, help="number of tablet servers [3]")
    ap.add_argument("--fresh", action="store_true", help="wipe the data directory first")
    ap.add_argument(
        "--random-ports",
        action="store_true",
        help="pick free ports instead of Kudu's defaults (master 7051/8051, tservers 7050/8050, 7150/8150, ...)",
    )
    ap.add_argument("--secure", action="store_true", help="TLS, authentication and authorization on (see above)")
    ap.add_argument("--exit-after-start", action="store_true", help="stop again once healthy (smoke test)")
    args = ap.parse_args()

    data_dir = Path(args.data_dir).resolve()
    if args.fresh and data_dir.exists():
        shutil.rmtree(data_dir)
    ports = None
    if not args.random_ports:
        masters = [(7051 + 100 * i, 8051 + 100 * i) for i in range(args.masters)]
        ports = masters + [(7050 + 100 * i, 8050 + 100 * i) for i in range(args.tservers)]
    policy = {"grant": [{"users": ["alice"], "tables": ["*"], "privileges": ["ALL"]}]} if args.secure else None
    cluster = MiniCluster(
        num_masters=args.masters,
        num_tservers=args.tservers,
        base_dir=data_dir,
        ports=ports,
        secure=args.secure,
        authz_policy=policy,
        extra_flags=["--user-acl=alice,admin"] if args.secure else (),
    )
    print(f"starting {args.masters} master(s) + {args.tservers} tablet servers, data in {data_dir}", flush=True)
    try:
        cluster.start()
    except MiniClusterError as e:
        print(f"cluster failed to start: {e}", file=sys.stderr)
        return 1
    for line in cluster.describe():
        print(line, flush=True)
    print(f"masters: {cluster.master_addresses}", flush=True)
    if args.secure:
        _write_credentials(cluster, data_dir)

    stop = threading.Event()
    if not args.exit_after_start:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        print("cluster is up; press Ctrl-C to stop", flush=True)
        while not stop.wait(1.0):
            # scripts/rolling_restart.py restarts nodes through <data-dir>/cluster.json: not a crash.
            restarting = cluster.adopt_restarted()
            dead = [n.name for n in cluster.nodes if not n.is_running() and n.name not in restarting]
            if dead:
                print(f"node(s) exited unexpectedly: {', '.join(dead)}; see their node.log", file=sys.stderr)
                break
    print("stopping cluster ...", flush=True)
    cluster.shutdown()
    print("cluster stopped", flush=True)
    return 0


def _write_credentials(cluster: MiniCluster, data_dir: Path) -> None:
    """The CA certificate to trust (once the leader master made it) and a day's JWTs for alice and admin."""
    deadline = time.monotonic() + 30
    status, pem = cluster.http_get(cluster.masters[0], "/ipki-ca-cert")
    while status != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
        status, pem = cluster.http_get(cluster.masters[0], "/ipki-ca-cert")
    if status != 200:
        raise MiniClusterError(f"the cluster CA certificate is not available: HTTP {status}")
    (data_dir / "ca.pem").write_bytes(pem)
    for user in ("alice", "admin"):
        path = data_dir / f"{user}.jwt"
        path.write_text(cluster.mint_jwt(user, ttl_s=86_400.0))
        os.chmod(path, 0o600)
    print(f"secured: trust {data_dir / 'ca.pem'}; JWTs in {data_dir}/alice.jwt and admin.jwt", flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""``kudu-admin``: the operator's command line.

Only commands backed by working server code are listed; the cluster, table and tablet commands of
DESIGN.md §4 join as the master and client land.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from kudu_async.common.errors import KuduBadStatus
from kudu_async.rpc.client import RpcClient
from kudu_async.server.config import parse_master_addresses


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kudu-admin", description="Administer a kudu_async cluster.")
    p.add_argument("--masters", default="127.0.0.1:7051", help="comma-separated master RPC addresses")
    p.add_argument("--timeout-ms", type=int, default=30_000, help="deadline of each call [30000]")
    sub = p.add_subparsers(dest="group", required=True)
    node = sub.add_parser("node", help="talk to one node directly")
    node_sub = node.add_subparsers(dest="command", required=True)
    for name, help_text in (("ping", "Generic/Ping a node"), ("status", "Generic/GetStatus of a node")):
        c = node_sub.add_parser(name, help=help_text)
        c.add_argument("address", help="node RPC address host:port")
    masters = sub.add_parser("master", help="the masters")
    m_sub = masters.add_subparsers(dest="command", required=True)
    m_sub.add_parser("list", help="status of every master in --masters")
    return p


async def _run(args: argparse.Namespace) -> Any:
    client = RpcClient(node_name="kudu-admin")
    timeout = args.timeout_ms / 1000.0
    try:
        if args.group == "node":
            method = "Ping" if args.command == "ping" else "GetStatus"
            return await client.call(args.address, "Generic", method, {}, timeout_s=timeout)
        if args.group == "master" and args.command == "list":
            out = []
            for addr in parse_master_addresses(args.masters):
                try:
                    out.append(await client.call(addr, "Generic", "GetStatus", {}, timeout_s=timeout))
                except KuduBadStatus as e:
                    out.append({"rpc_address": addr, "error": e.to_dict()})
            return out
        raise AssertionError(f"unhandled command {args.group} {args.command}")
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = asyncio.run(_run(args))
    except KuduBadStatus as e:
        print(f"kudu-admin: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"kudu-admin: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

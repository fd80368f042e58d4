"""``kudu-admin``: the operator's command line.

Only commands backed by working server code are listed. Until the master keeps tablet locations, the
``tablet`` commands take the replicas' servers with ``--servers``; cluster and table commands of
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
    sub = p.add_subparsers(dest="area", required=True)
    node = sub.add_parser("node", help="talk to one node directly")
    node_sub = node.add_subparsers(dest="command", required=True)
    for name, help_text in (("ping", "Generic/Ping a node"), ("status", "Generic/GetStatus of a node")):
        c = node_sub.add_parser(name, help=help_text)
        c.add_argument("address", help="node RPC address host:port")
    tablet = sub.add_parser("tablet", help="Raft groups (tablet replicas) on a set of servers")
    t_sub = tablet.add_subparsers(dest="command", required=True)
    for name, help_text in (("leader-step-down", "make the group's leader step down (an election follows)"),
                            ("transfer-leadership", "hand leadership to a named, caught-up replica"),
                            ("raft-state", "each server's view of the group"),
                            ("change-config", "add a NON_VOTER (ADD_LEARNER; filled by tablet copy), PROMOTE it, "
                                              "ADD_VOTER or REMOVE a replica, through the leader")):
        c = t_sub.add_parser(name, help=help_text)
        c.add_argument("group", help="tablet id / raft group id")
        if name == "transfer-leadership":
            c.add_argument("peer", help="uuid of the replica that should lead")
        if name == "change-config":
            c.add_argument("op", choices=("ADD_LEARNER", "PROMOTE", "ADD_VOTER", "REMOVE"))
            c.add_argument("peer", help="uuid of the replica to add, promote or remove")
            c.add_argument("--address", help="RPC address of an added replica's tablet server")
        c.add_argument("--servers", required=True, help="comma-separated RPC addresses of the replicas' servers")
    masters = sub.add_parser("master", help="the masters")
    m_sub = masters.add_subparsers(dest="command", required=True)
    m_sub.add_parser("list", help="status of every master in --masters")
    return p


async def _run(args: argparse.Namespace) -> Any:
    client = RpcClient(node_name="kudu-admin")
    timeout_s = args.timeout_ms / 1000.0
    try:
        if args.area == "node":
            method = "Ping" if args.command == "ping" else "GetStatus"
            return await client.call(args.address, "Generic", method, {}, timeout_s=timeout_s)
        if args.area == "tablet":
            return await _tablet_command(client, args, timeout_s)
        if args.area == "master" and args.command == "list":
            out = []
            for addr in parse_master_addresses(args.masters):
                try:
                    out.append(await client.call(addr, "Generic", "GetStatus", {}, timeout_s=timeout_s))
                except KuduBadStatus as e:
                    out.append({"rpc_address": addr, "error": e.to_dict()})
            return out
        raise AssertionError(f"unhandled command {args.area} {args.command}")
    finally:
        await client.close()


async def _tablet_command(client: RpcClient, args: argparse.Namespace, timeout_s: float) -> Any:
    servers = [a.strip() for a in args.servers.split(",") if a.strip()]
    states: dict[str, Any] = {}
    for addr in servers:
        try:
            states[addr] = await client.call(addr, "Consensus", "GetState", {"group": args.group}, timeout_s=timeout_s)
        except KuduBadStatus as e:
            states[addr] = {"error": e.to_dict()}
    if args.command == "raft-state":
        return states
    leaders = [a for a, st in states.items() if st.get("role") == "LEADER"]
    if not leaders:
        raise KuduBadStatus(f"no server in {servers} leads {args.group}: {states}")
    # With a stale leader still around, the one with the highest term is the real one.
    leader = max(leaders, key=lambda a: states[a].get("term", 0))
    if args.command == "change-config":
        req = {"group": args.group, "op": args.op, "peer": args.peer}
        if args.address:
            req["address"] = args.address
        return await client.call(leader, "Consensus", "ChangeConfig", req, timeout_s=timeout_s)
    if args.command == "leader-step-down":
        return await client.call(leader, "Consensus", "StepDown", {"group": args.group}, timeout_s=timeout_s)
    return await client.call(leader, "Consensus", "TransferLeadership", {"group": args.group, "peer": args.peer},
                             timeout_s=timeout_s)


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

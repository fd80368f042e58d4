"""``kudu-admin``: the operator's command line (Kudu's ``kudu`` tool, the commands its operators use most).

Cluster-wide commands go through the public client (leader master discovery, retries within
``--timeout-ms``). Text output for people by default; ``--json`` (anywhere on the line) prints one JSON
document for scripts. Exit status: 0 done, 1 the command failed or ksck found problems, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from kudu_async.client.aio import AsyncClient, master_addresses
from kudu_async.client.authn import os_user
from kudu_async.client.options import ENCRYPTION_OPTIONAL, ENCRYPTION_REQUIRED, ENCRYPTION_REQUIRED_REMOTE, client_tls
from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument
from kudu_async.common.retry import Deadline
from kudu_async.rpc.client import RpcClient
from kudu_async.security.identity import kudu_token_header
from kudu_async.security.tls import ClientTls
from kudu_async.tools import ksck, loadgen, rebalancer_tool, replica_util, table_tool

WRITE_TYPES = ("insert", "insert_ignore", "upsert", "upsert_ignore")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's own --json must not reset one given before the area.
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts")
    p = argparse.ArgumentParser(prog="kudu-admin", description="Administer a kudu_async cluster.", parents=[common])
    p.add_argument("--masters", default="127.0.0.1:7051", help="comma-separated master RPC addresses")
    p.add_argument("--timeout-ms", type=int, default=30_000, help="deadline of each operation [30000]")
    p.add_argument(
        "--encryption-policy",
        choices=(ENCRYPTION_OPTIONAL, ENCRYPTION_REQUIRED_REMOTE, ENCRYPTION_REQUIRED),
        default=os.environ.get("KUDU_ENCRYPTION_POLICY", ENCRYPTION_OPTIONAL),
        help="TLS to the cluster: optional (when the server can), required_remote, required "
        "[env KUDU_ENCRYPTION_POLICY; optional]",
    )
    p.add_argument(
        "--trusted-certificates",
        default=os.environ.get("KUDU_TRUSTED_CERTIFICATES", ""),
        metavar="FILE[,FILE]",
        help="PEM files of the CA certificates the servers' certificates must verify against, e.g. the "
        "master's /ipki-ca-cert [env KUDU_TRUSTED_CERTIFICATES; none: encrypt without verifying]",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--jwt",
        default=os.environ.get("KUDU_JWT") or None,
        help="a JWT to authenticate with: the masters check it and issue an authn token [$KUDU_JWT]",
    )
    p.add_argument(
        "--authn-token",
        default=os.environ.get("KUDU_AUTHN_TOKEN") or None,
        help="an authn token (base64) the masters issued, shown as is until it expires [$KUDU_AUTHN_TOKEN]",
    )
    sub = p.add_subparsers(dest="area", required=True)

    def area(name: str, help_text: str) -> Any:
        return sub.add_parser(name, help=help_text).add_subparsers(dest="command", required=True)

    def cmd(group: Any, name: str, help_text: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = group.add_parser(name, help=help_text, parents=[common])
        return c

    _add_cluster_commands(area("cluster", "the whole cluster"), cmd)
    ms = area("master", "the masters")
    cmd(ms, "list", "every master: uuid, address, role")
    ts = area("tserver", "the tablet servers")
    cmd(ts, "list", "every tablet server the leader master knows: uuid, address, liveness, state, replicas")
    c = cmd(
        ts,
        "state",
        "enter_maintenance: the master does not re-replicate the tserver's replicas however long it is down "
        "(a planned restart); exit_maintenance: normal failure handling again",
    )
    c.add_argument("change", choices=sorted(_STATE_CHANGES), help="the state change")
    c.add_argument("uuid", help="the tablet server's uuid")
    c.add_argument(
        "--allow-missing-tserver",
        "--allow_missing_tserver",
        action="store_true",
        help="set the state of a uuid the leader master has not heard from",
    )
    c = cmd(
        ts,
        "quiesce",
        "start: the tserver hands its leaderships to other replicas, stands for no election and refuses new "
        "scans; stop: undo it; status: its leaders and open scanners",
    )
    c.add_argument("action", choices=("start", "stop", "status"), help="what to do")
    c.add_argument("address", help="the tablet server's RPC address host:port")
    _add_table_commands(area("table", "tables"), cmd)
    _add_tablet_commands(
        area("tablet", "tablet replicas (Raft groups); servers come from the master unless --servers is given"), cmd
    )
    nd = area("node", "talk to one node directly")
    for name, help_text in (("ping", "Generic/Ping a node"), ("status", "Generic/GetStatus of a node")):
        cmd(nd, name, help_text).add_argument("address", help="node RPC address host:port")
    _add_perf_commands(area("perf", "load generation"), cmd)
    return p


# A subcommand adder: (area's subparsers, name, help) -> the subcommand's parser.
_Cmd = Callable[[Any, str, str], argparse.ArgumentParser]


def _add_cluster_commands(cl: Any, cmd: _Cmd) -> None:
    c = cmd(cl, "ksck", "check every master, tserver, table and tablet; exit 1 with a report when unhealthy")
    c.add_argument("--tables", help="comma-separated tables to check [all]")
    c.add_argument("--checksum", action="store_true", help="also compare a snapshot checksum of every replica")
    c = cmd(
        cl,
        "rebalance",
        "even out replicas (per table, then overall) and then tablet leaders across the live "
        "tablet servers; refuses to start unless ksck finds every tablet in scope healthy",
    )
    c.add_argument("--tables", help="comma-separated tables to balance [all]")
    c.add_argument(
        "--ignored-tservers",
        help="comma-separated tablet server uuids to leave alone: nothing moves "
        "to or from them and they are not counted",
    )
    only = c.add_mutually_exclusive_group()
    only.add_argument("--leaders-only", action="store_true", help="only even out tablet leaders")
    only.add_argument("--replicas-only", action="store_true", help="only move replicas, leave leaders")
    c.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    c.add_argument(
        "--max-moves-per-server",
        type=int,
        default=rebalancer_tool.DEFAULT_MAX_MOVES_PER_SERVER,
        help="replica moves (or leader transfers) in flight touching one tablet server "
        f"[{rebalancer_tool.DEFAULT_MAX_MOVES_PER_SERVER}]",
    )
    c.add_argument(
        "--max-run-time-sec",
        type=float,
        default=rebalancer_tool.DEFAULT_MAX_RUN_TIME_S,
        help="deadline of the whole run: moves in flight then are cut off, the rest skipped "
        f"[{rebalancer_tool.DEFAULT_MAX_RUN_TIME_S:g}]",
    )


def _add_table_commands(tb: Any, cmd: _Cmd) -> None:
    c = cmd(tb, "list", "table names")
    c.add_argument("--filter", help="only names containing this")
    c.add_argument("--list-tablets", action="store_true", help="also each table's tablets and replicas")
    cmd(tb, "describe", "schema, partitioning and replication of a table").add_argument("name")
    c = cmd(tb, "create", "create a table from Kudu's JSON table spec (a string, or @file)")
    c.add_argument("spec")
    cmd(tb, "delete", "delete a table").add_argument("name")
    c = cmd(tb, "scan", "print a table's rows (CSV with a header, or JSON Lines)")
    c.add_argument("name")
    c.add_argument("--columns", help="comma-separated columns to print [all]")
    c.add_argument("--predicates", help='Kudu JSON predicates, e.g. \'["AND", [">=", "key", 5], ["IN", "c", [1, 2]]]\'')
    c.add_argument("--format", choices=("csv", "json"), default="csv")
    c.add_argument("--limit", type=int)
    c = cmd(tb, "copy", "copy a table's rows into another table (maybe on another cluster)")
    c.add_argument("src")
    c.add_argument("dst")
    c.add_argument("--dst-masters", help="the destination cluster's masters [the source cluster]")
    c.add_argument("--create-table", action="store_true", help="create the destination like the source")
    c.add_argument("--write-type", choices=WRITE_TYPES, default="insert")
    c.add_argument("--predicates", help="only rows matching these (Kudu JSON predicates)")
    c.add_argument("--num-replicas", type=int, help="replication of a created destination [the source's]")
    cmd(tb, "statistics", "live rows, bytes on disk and in memory").add_argument("name")


def _add_tablet_commands(tl: Any, cmd: _Cmd) -> None:
    specs: list[tuple[str, str]] = [
        ("leader-step-down", "make the tablet's leader step down (an election follows)"),
        ("transfer-leadership", "hand leadership to a named, caught-up replica"),
        ("raft-state", "each replica's view of its Raft group"),
        (
            "change-config",
            "add (a new replica, copied and then promoted; the master trims the tablet back to its "
            "replication factor) or remove a replica; or a raw Raft change: ADD_LEARNER, PROMOTE, "
            "ADD_VOTER, REMOVE",
        ),
        ("move-replica", "move a replica from one tablet server to another (add, copy, promote, remove)"),
    ]
    for name, help_text in specs:
        c = cmd(tl, name, help_text)
        c.add_argument("tablet", help="tablet id (or Raft group id)")
        if name == "transfer-leadership":
            c.add_argument("peer", help="uuid of the replica that should lead")
        if name == "change-config":
            c.add_argument("op", choices=("add", "remove", "ADD_LEARNER", "PROMOTE", "ADD_VOTER", "REMOVE"))
            c.add_argument("peer", help="uuid of the tablet server (replica) to add, promote or remove")
            c.add_argument(
                "--type", choices=("VOTER", "NON_VOTER"), default="VOTER", help="add: the new replica's type [VOTER]"
            )
            c.add_argument("--address", help="RPC address of an added replica's server [from the master]")
        if name == "move-replica":
            c.add_argument("src", help="uuid of the tablet server to move the replica from")
            c.add_argument("dst", help="uuid of the tablet server to move it to")
        c.add_argument("--servers", help="comma-separated RPC addresses of the replicas' servers [from the master]")


def _add_perf_commands(pf: Any, cmd: _Cmd) -> None:
    c = cmd(pf, "loadgen", "write N rows with K concurrent writers; print rows/s and batch latency percentiles")
    d = loadgen.LoadgenOptions()
    c.add_argument("--table", help="write into this existing table [auto-create one]")
    c.add_argument("--rows", type=int, default=d.rows, help=f"rows to write [{d.rows}]")
    c.add_argument("--threads", type=int, default=d.threads, help=f"concurrent writers [{d.threads}]")
    c.add_argument("--batch-rows", type=int, default=d.batch_rows, help=f"rows per write batch [{d.batch_rows}]")
    c.add_argument("--buckets", type=int, default=d.buckets, help=f"hash buckets of the auto table [{d.buckets}]")
    c.add_argument("--replicas", type=int, default=d.replicas, help=f"replicas of the auto table [{d.replicas}]")
    c.add_argument("--string-len", type=int, default=d.string_len, help=f"string values' length [{d.string_len}]")
    c.add_argument("--key-start", type=int, default=0, help="first key [0]")
    c.add_argument("--keep-auto-table", action="store_true", help="keep the auto-created table")
    c.add_argument("--row-mode", action="store_true", help="one apply() per row (FLUSH_AUTO_BACKGROUND)")
    c.add_argument("--run-scan", action="store_true", help="count the table's rows afterwards")


# --- commands ---------------------------------------------------------------------------------------


async def _run(args: argparse.Namespace) -> _Result:
    """(result, text renderer or None for JSON only, exit status)."""
    tls = _tls(args)
    if args.area == "node" and args.jwt is None:
        rpc = RpcClient(node_name="kudu-admin", tls=tls)
        rpc.set_credentials(os_user(), None if args.authn_token is None else _token_header(args.authn_token))
        try:
            method = "Ping" if args.command == "ping" else "GetStatus"
            return await rpc.call(args.address, "Generic", method, {}, timeout_s=args.timeout_ms / 1000), None, 0
        finally:
            await rpc.close()
    client = _client(args.masters, args)
    try:
        await client.core.authenticate()
        if args.area == "node":  # with a JWT: the authn token it got from the masters goes to the node
            method = "Ping" if args.command == "ping" else "GetStatus"
            reply = await client.rpc.call(args.address, "Generic", method, {}, timeout_s=args.timeout_ms / 1000)
            return reply, None, 0
        if args.area == "tablet":
            return await _tablet_command(client, args), None, 0
        return await _cluster_command(client, args)
    finally:
        await client.close()


def _token_header(b64: str) -> bytes:
    try:
        return kudu_token_header(base64.b64decode(b64, validate=True))
    except (binascii.Error, ValueError):
        raise ValueError("--authn-token must be the base64 of an authn token") from None


def _tls(args: argparse.Namespace) -> ClientTls:
    """The command line's encryption policy and trusted certificates."""
    return client_tls(args.encryption_policy, [f for f in args.trusted_certificates.split(",") if f] or None)


def _client(masters: str, args: argparse.Namespace) -> AsyncClient:
    """A client with the command line's credentials (a JWT, an authn token, or the OS user's name) and
    encryption policy."""
    client = AsyncClient(
        master_addresses(masters.split(","), None), admin_timeout_ms=args.timeout_ms, tls=_tls(args), jwt=args.jwt
    )
    if args.jwt is None and args.authn_token is not None:
        client.rpc.set_credentials(os_user(), _token_header(args.authn_token))
    return client


# (result, text renderer or None for JSON only, exit status)
_Result = tuple[Any, Callable[[Any], str] | None, int]


async def _cluster_command(client: AsyncClient, args: argparse.Namespace) -> _Result:
    handler = _COMMANDS.get((args.area, args.command))
    if handler is None:
        raise AssertionError(f"unhandled command {args.area} {args.command}")
    return await handler(client, args)


async def _ksck(client: AsyncClient, args: argparse.Namespace) -> _Result:
    snap = await ksck.collect(client, _names(args.tables, "--tables"), args.checksum, args.timeout_ms / 1000)
    report = ksck.evaluate(snap)
    return report, ksck.render, 0 if report["ok"] else 1


async def _rebalance(client: AsyncClient, args: argparse.Namespace) -> _Result:
    ropts = rebalancer_tool.RebalanceOptions(
        tables=_names(args.tables, "--tables"),
        ignored_tservers=frozenset(_names(args.ignored_tservers, "--ignored-tservers") or ()),
        leaders_only=args.leaders_only,
        replicas_only=args.replicas_only,
        dry_run=args.dry_run,
        max_moves_per_server=args.max_moves_per_server,
        max_run_time_s=args.max_run_time_sec,
        timeout_s=args.timeout_ms / 1000,
        progress=not args.no_progress,
    )
    rep = await rebalancer_tool.run(client, ropts)
    return rep, rebalancer_tool.render, 0 if rep["ok"] else 1


async def _masters(client: AsyncClient, args: argparse.Namespace) -> _Result:
    return await _master_list(client), _render_masters, 0


async def _tservers(client: AsyncClient, args: argparse.Namespace) -> _Result:
    return await client.list_tablet_servers(), _render_tservers, 0


_STATE_CHANGES = {"enter_maintenance": "ENTER_MAINTENANCE_MODE", "exit_maintenance": "EXIT_MAINTENANCE_MODE"}


async def _tserver_state(client: AsyncClient, args: argparse.Namespace) -> _Result:
    req = {
        "uuid": args.uuid,
        "change": _STATE_CHANGES[args.change],
        "allow_missing_tserver": args.allow_missing_tserver,
    }
    deadline = Deadline(args.timeout_ms / 1000, f"tserver state {args.change} {args.uuid}")
    reply = await client.masters.call("ChangeTServerState", req, deadline)
    return (
        reply,
        lambda r: f"tserver {r['uuid']}: {r['state']}" + ("" if r["changed"] else " (unchanged)"),
        0,
    )


async def _tserver_quiesce(client: AsyncClient, args: argparse.Namespace) -> _Result:
    reply = await client.rpc.call(
        args.address, "TabletServer", "Quiesce", {"action": args.action}, timeout_s=args.timeout_ms / 1000
    )
    return (
        reply,
        lambda r: (
            f"{args.address}: {'quiescing' if r['quiescing'] else 'not quiescing'}, {r['num_leaders']} leaders, "
            f"{r['num_active_scanners']} active scanners"
        ),
        0,
    )


async def _loadgen(client: AsyncClient, args: argparse.Namespace) -> _Result:
    opts = loadgen.LoadgenOptions(
        rows=args.rows,
        threads=args.threads,
        batch_rows=args.batch_rows,
        table=args.table,
        buckets=args.buckets,
        replicas=args.replicas,
        string_len=args.string_len,
        keep_auto_table=args.keep_auto_table,
        row_mode=args.row_mode,
        key_start=args.key_start,
        run_scan=args.run_scan,
        progress=not args.no_progress,
    )
    res = await loadgen.run(client, opts)
    return res, _render_loadgen, 1 if res["errors"] else 0


async def _table_list(client: AsyncClient, args: argparse.Namespace) -> _Result:
    names = await client.list_tables(args.filter)
    if not args.list_tablets:
        return names, lambda r: "\n".join(r), 0
    return [await table_tool.describe(client, n) for n in names], _render_table_tablets, 0


async def _table_describe(client: AsyncClient, args: argparse.Namespace) -> _Result:
    return await table_tool.describe(client, args.name), table_tool.render_describe, 0


async def _table_create(client: AsyncClient, args: argparse.Namespace) -> _Result:
    spec = _load_spec(args.spec)
    name, schema, part, n, extra = table_tool.spec_to_create_args(spec)
    await client.create_table(name, schema, part, n_replicas=n, owner=extra.get("owner"), comment=extra.get("comment"))
    return {"created": name}, lambda r: f"created table {r['created']}", 0


async def _table_delete(client: AsyncClient, args: argparse.Namespace) -> _Result:
    await client.delete_table(args.name)
    return {"deleted": args.name}, lambda r: f"deleted table {r['deleted']}", 0


async def _table_scan(client: AsyncClient, args: argparse.Namespace) -> _Result:
    if getattr(args, "json", False):
        args.format = "json"
    cols = [x for x in (args.columns or "").split(",") if x] or None
    await table_tool.scan(
        client, args.name, cols, args.predicates, args.format, args.limit, sys.stdout.buffer, not args.no_progress
    )
    return None, None, 0


async def _table_copy(client: AsyncClient, args: argparse.Namespace) -> _Result:
    dst = None
    if args.dst_masters:
        dst = _client(args.dst_masters, args)
    try:
        options = table_tool.CopyOptions(
            create_table=args.create_table,
            write_type=args.write_type,
            predicates=args.predicates,
            num_replicas=args.num_replicas,
            progress=not args.no_progress,
        )
        res = await table_tool.copy(client, args.src, args.dst, dst, options)
    finally:
        if dst is not None:
            await dst.close()
    return (
        res,
        lambda r: (
            f"copied {r['rows']:,} rows from {r['source']} to {r['destination']} in "
            f"{r['seconds']} s ({r['rows_per_s'] or 0:,} rows/s)"
        ),
        0,
    )


async def _table_statistics(client: AsyncClient, args: argparse.Namespace) -> _Result:
    return await table_tool.statistics(client, args.name), _render_stats, 0


_COMMANDS: dict[tuple[str, str], Callable[[AsyncClient, argparse.Namespace], Awaitable[_Result]]] = {
    ("cluster", "ksck"): _ksck,
    ("cluster", "rebalance"): _rebalance,
    ("master", "list"): _masters,
    ("tserver", "list"): _tservers,
    ("tserver", "state"): _tserver_state,
    ("tserver", "quiesce"): _tserver_quiesce,
    ("perf", "loadgen"): _loadgen,
    ("table", "list"): _table_list,
    ("table", "describe"): _table_describe,
    ("table", "create"): _table_create,
    ("table", "delete"): _table_delete,
    ("table", "scan"): _table_scan,
    ("table", "copy"): _table_copy,
    ("table", "statistics"): _table_statistics,
}


def _names(text: str | None, flag: str) -> list[str] | None:
    """A comma-separated list flag: None when not given; an empty item is a usage error naming the flag."""
    if text is None:
        return None
    names = [x.strip() for x in text.split(",")]
    if not all(names):
        raise ValueError(f"{flag}: empty name in {text!r}")
    return names


def _load_spec(text: str) -> Any:
    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise KuduInvalidArgument(f"the table spec is not valid JSON: {e}") from None


async def _master_list(client: AsyncClient) -> list[dict[str, Any]]:
    """The leader's view of the master Raft config, joined with each master's own status."""
    try:
        members = await client.list_masters()
    except KuduBadStatus:
        members = [{"uuid": None, "rpc_address": a, "role": "UNKNOWN"} for a in client.master_addrs]
    out = []
    for m in members:
        try:
            st = await client.rpc.call(m["rpc_address"], "Generic", "GetStatus", {}, timeout_s=5.0)
            out.append(
                {
                    **m,
                    "http_address": st.get("http_address"),
                    "version": st.get("version"),
                    "uptime_s": st.get("uptime_s"),
                    "term": st.get("term"),
                }
            )
        except KuduBadStatus as e:
            out.append({**m, "error": str(e)})
    return out


def _render_masters(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'uuid':<34} {'rpc address':<22} {'role':<9} {'http address':<22} status"]
    for m in rows:
        status = f"UNAVAILABLE: {m['error']}" if "error" in m else f"up {m.get('uptime_s')} s, term {m.get('term')}"
        lines.append(
            f"{m.get('uuid') or '-':<34} {m['rpc_address']:<22} {m['role']:<9} "
            f"{m.get('http_address') or '-':<22} {status}"
        )
    return "\n".join(lines)


def _render_tservers(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'uuid':<34} {'rpc address':<22} {'http address':<22} {'live':<5} {'state':<16} replicas leaders  heartbeat"
    ]
    for t in rows:
        lines.append(
            f"{t['uuid']:<34} {t['rpc_address']:<22} {t.get('http_address') or '-':<22} "
            f"{'LIVE' if t.get('live') else 'DEAD':<5} {t.get('state', 'NONE'):<16} {t.get('num_replicas', 0):>8} "
            f"{t.get('num_leaders', 0):>7}  {t.get('last_heartbeat_age_s')} s ago"
        )
    return "\n".join(lines)


def _render_table_tablets(rows: list[dict[str, Any]]) -> str:
    lines = []
    for d in rows:
        lines.append(d["name"])
        for t in d["tablets"]:
            reps = ", ".join(f"{r['uuid'][:8]}@{r['rpc_address']} {r['role']}" for r in t["replicas"])
            lines.append(f"  T {t['tablet_id']}  {reps}")
    return "\n".join(lines)


def _render_stats(s: dict[str, Any]) -> str:
    lines = [
        f"TABLE {s['table']}",
        f"  live row count: {s['live_row_count']:,}",
        f"  on disk size: {s['on_disk_size']:,} bytes (leaders; {s['on_disk_size_all_replicas']:,} bytes "
        "with every replica and WAL)",
        f"  memory: {s['memory_size']:,} bytes",
        f"  tablets: {s['num_tablets']}, replication factor {s['num_replicas']}",
    ]
    if s["replicas_unreachable"]:
        lines.append("  unreachable replicas: " + "; ".join(s["replicas_unreachable"]))
    return "\n".join(lines)


def _render_loadgen(r: dict[str, Any]) -> str:
    lat = r["batch_latency_ms"]
    lines = [
        f"wrote {r['rows']:,} rows into {r['table']} with {r['threads']} writers ({r['mode']} mode, "
        f"{r['batch_rows']} rows per batch) in {r['seconds']} s: {r['rows_per_s'] or 0:,} rows/s",
        f"batch latency ms: p50 {lat['p50']}  p95 {lat['p95']}  p99 {lat['p99']}  max {lat['max']}",
        "table kept" if r["kept"] else "auto-created table dropped",
    ]
    if "scan" in r:
        lines.append(f"scan counted {r['scan']['rows']:,} rows in {r['scan']['seconds']} s")
    lines += [f"ERROR: {e}" for e in r["errors"]]
    return "\n".join(lines)


# --- tablet commands --------------------------------------------------------------------------------


async def _tablet_servers(client: AsyncClient, args: argparse.Namespace) -> list[str]:
    if args.servers:
        return [a.strip() for a in args.servers.split(",") if a.strip()]
    deadline = Deadline(args.timeout_ms / 1000, f"locations of tablet {args.tablet}")
    reply = await client.masters.call("GetTabletLocations", {"tablet_ids": [args.tablet]}, deadline)
    if not reply.get("tablets"):
        raise KuduInvalidArgument(
            f"the master knows no tablet {args.tablet} (a Raft group that is not a table's tablet needs --servers)"
        )
    return [r["rpc_address"] for r in reply["tablets"][0]["replicas"] if r.get("rpc_address")]


async def _tablet_command(client: AsyncClient, args: argparse.Namespace) -> Any:
    timeout_s = args.timeout_ms / 1000.0
    rpc = client.rpc
    servers = await _tablet_servers(client, args)
    by_addr = await replica_util.states(rpc, servers, args.tablet, timeout_s)
    if args.command == "raft-state":
        return by_addr
    leader = replica_util.leader_of(by_addr, args.tablet)
    if args.command == "leader-step-down":
        return await rpc.call(leader, "Consensus", "StepDown", {"group": args.tablet}, timeout_s=timeout_s)
    if args.command == "transfer-leadership":
        return await rpc.call(
            leader, "Consensus", "TransferLeadership", {"group": args.tablet, "peer": args.peer}, timeout_s=timeout_s
        )
    if args.command == "move-replica":
        return await replica_util.move_replica(client, args.tablet, args.src, args.dst, leader, timeout_s)
    op = args.op
    if op in ("add", "ADD_LEARNER", "ADD_VOTER"):
        address = args.address or await replica_util.ts_address(client, args.peer)
        if op == "add":
            return await replica_util.add_replica(
                rpc, args.tablet, leader, args.peer, address, args.type == "VOTER", timeout_s
            )
        return await replica_util.change_config(rpc, leader, args.tablet, op, args.peer, address, timeout_s)
    return await replica_util.change_config(
        rpc, leader, args.tablet, "REMOVE" if op == "remove" else op, args.peer, None, timeout_s
    )


# --- entry point ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout_ms <= 0:
        print("kudu-admin: --timeout-ms must be positive", file=sys.stderr)
        return 2
    try:
        result, render, status = asyncio.run(_run(args))
    except KuduBadStatus as e:
        print(f"kudu-admin: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"kudu-admin: {e}", file=sys.stderr)
        return 2
    if result is None:
        return status
    if getattr(args, "json", False) or render is None:
        print(json.dumps(result, indent=2, sort_keys=True, default=str))
    else:
        print(render(result))
    return status


if __name__ == "__main__":
    sys.exit(main())

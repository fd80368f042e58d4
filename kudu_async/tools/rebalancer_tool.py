"""``kudu cluster rebalance``: gather the placement, refuse when moving is unsafe, carry out the
plan of ``rebalance`` (replica moves, then leader transfers) and report.

The placement comes from ksck's snapshot (the leader master's tablet locations, every live tserver's own
reports of its replicas), so "unsafe" means what ksck means: a tablet in scope that is not HEALTHY (no
leader, a replica not RUNNING, an unreachable server, configs that disagree), or one with a config
change in flight (a non-voter, more voters than its replication factor). The tool refuses to start on
such a cluster and names the tablets; between rounds it waits (within the deadline) for the cluster to
settle back to that state, since the master's view trails the replicas by a heartbeat.

Work goes in rounds: plan, run the plan (moves concurrently, at most ``-max_moves_per_server`` in flight
touching any one server, one at a time per tablet), look again, plan again, until the plan is empty,
a round achieves nothing, or ``-max_run_time_sec`` runs out. A move is ``replica_util.move_replica``
(add learner, tablet copy, promote, remove); a leader transfer is ``Consensus/TransferLeadership`` to a
caught-up voter, confirmed by that voter's own state, with the plan's alternatives tried when it is
refused or does not happen.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from kudu_async.client.aio import AsyncClient
from kudu_async.common import rebalance as rb
from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument
from kudu_async.common.retry import Deadline
from kudu_async.tools import ksck, replica_util
from kudu_async.tools.progress import progress

DEFAULT_MAX_MOVES_PER_SERVER = 5  # Kudu's --max_moves_per_server
DEFAULT_MAX_RUN_TIME_S = 3600.0
MAX_ROUNDS = 5  # plan -> run -> look again; a healthy cluster needs one or two
SETTLE_TIMEOUT_S = 60.0  # after a round, how long the cluster may take to look healthy again

T = TypeVar("T")


@dataclass
class RebalanceOptions:
    tables: list[str] | None = None  # None: every table
    ignored_tservers: frozenset[str] = frozenset()
    leaders_only: bool = False
    replicas_only: bool = False
    dry_run: bool = False
    max_moves_per_server: int = DEFAULT_MAX_MOVES_PER_SERVER
    max_run_time_s: float = DEFAULT_MAX_RUN_TIME_S
    timeout_s: float = 30.0  # each RPC
    progress: bool = True
    out: IO[str] | None = field(default=None, repr=False)  # progress lines (stderr)

    def check(self) -> None:
        """Bad combinations are usage errors (ValueError: exit status 2)."""
        if self.leaders_only and self.replicas_only:
            raise ValueError("-leaders_only and -replicas_only exclude each other")
        if self.max_moves_per_server < 1:
            raise ValueError(f"-max_moves_per_server must be >= 1, got {self.max_moves_per_server}")
        if self.max_run_time_s <= 0:
            raise ValueError(f"-max_run_time_sec must be positive, got {self.max_run_time_s:g}")
        if self.tables is not None and not self.tables:
            raise ValueError("-tables names no table")


# --- snapshot -> placement (no I/O) ---------------------------------------------------------------------


@dataclass
class ClusterView:
    """The placement to plan on, why it is unsafe to move (empty: safe), and where the servers are."""

    placement: rb.Placement
    problems: list[str]
    addresses: dict[str, str]  # tserver uuid -> RPC address
    excluded: dict[str, str]  # tserver uuid -> why it takes no part (ignored, dead, unreachable)


def view_from_snapshot(snap: ksck.Snapshot, ignored: frozenset[str] = frozenset()) -> ClusterView:
    """Turn ksck's snapshot into the planner's placement; list every tablet ksck would not call HEALTHY
    and every tablet in the middle of a config change."""
    addresses = {d["uuid"]: str(d["rpc_address"]) for d in snap.tservers}
    excluded: dict[str, str] = {}
    servers: set[str] = set()
    for d in snap.tservers:
        u = d["uuid"]
        status = snap.tserver_status.get(u, {})
        if u in ignored:
            excluded[u] = "ignored (-ignored_tservers)"
        elif not d.get("live"):
            excluded[u] = "not live (the master has not heard from it)"
        elif u not in snap.reports or "error" in status:
            excluded[u] = f"unreachable: {status.get('error', 'did not list its tablets')}"
        else:
            servers.add(u)
    problems: list[str] = []
    tablets: list[rb.Tablet] = []
    for table in snap.tables:
        for loc in table["tablets"]:
            tid = loc["tablet_id"]
            v = ksck.tablet_verdict(loc, table["num_replicas"], snap)
            voters = frozenset(r["uuid"] for r in loc["replicas"] if r.get("role") in ("LEADER", "FOLLOWER"))
            others = sorted(r["uuid"] for r in loc["replicas"] if r.get("role") not in ("LEADER", "FOLLOWER"))
            where = f"table {table['name']} tablet {tid}"
            if v["status"] != ksck.HEALTHY:
                problems.append(f"{where}: {v['status']}: {'; '.join(v['why']) or 'see ksck'}")
            elif others:
                problems.append(f"{where}: a config change is in flight (non-voter replica on {', '.join(others)})")
            elif len(voters) > table["num_replicas"]:
                problems.append(
                    f"{where}: {len(voters)} voters for replication factor {table['num_replicas']} "
                    "(the master is trimming it)"
                )
            leader = v["leader"] if v["leader"] in voters else None
            tablets.append(rb.Tablet(tid, table["name"], voters, leader))
    return ClusterView(rb.Placement(frozenset(servers), tuple(tablets)), problems, addresses, excluded)


# --- running ---------------------------------------------------------------------------------------------


class _Run:
    """One ``cluster rebalance`` invocation: its deadline, its report, its progress lines."""

    def __init__(self, client: AsyncClient, opts: RebalanceOptions) -> None:
        self.client, self.opts = client, opts
        self.deadline = Deadline(opts.max_run_time_s, "cluster rebalance (-max_run_time_sec)")
        self.out = opts.out if opts.out is not None else sys.stderr
        self.report: dict[str, Any] = {
            "dry_run": opts.dry_run,
            "tables": opts.tables or "all",
            "ignored_tservers": sorted(opts.ignored_tservers),
            "mode": "leaders-only" if opts.leaders_only else "replicas-only" if opts.replicas_only else "all",
            "replica_moves": [],
            "leader_transfers": [],
            "errors": [],
            "refused": [],
        }

    def say(self, line: str) -> None:
        if self.opts.progress:
            self.out.write(f"rebalance: {line}\n")
            self.out.flush()

    async def look(self) -> ClusterView:
        snap = await ksck.collect(self.client, self.opts.tables, False, self.opts.timeout_s)
        return view_from_snapshot(snap, self.opts.ignored_tservers)

    async def settle(self) -> ClusterView | None:
        """Look until the cluster is safe to plan on again (the master's view catches up with the moves);
        None, with the problems in the report, if it does not within SETTLE_TIMEOUT_S or the deadline."""
        if self.deadline.remaining() <= 0:
            view = await self.look()
            if view.problems:
                self.report["errors"].append(
                    "-max_run_time_sec ran out with the cluster still settling (moves cut "
                    "off leave their new replica to the master, which finishes the copy, "
                    "promotes it and trims the tablet): " + "; ".join(view.problems)
                )
                return None
            return view
        wait = Deadline(min(SETTLE_TIMEOUT_S, self.deadline.remaining()), "the cluster to settle")
        while True:
            view = await self.look()
            if not view.problems:
                return view
            if wait.remaining() <= 0:
                self.report["errors"].append(
                    f"the cluster did not settle within {wait.timeout_s:.1f} s after the "
                    "last round: " + "; ".join(view.problems)
                )
                return None
            await asyncio.sleep(min(0.5, max(0.0, wait.remaining())))

    async def run(self) -> dict[str, Any]:
        opts, report = self.opts, self.report
        await _check_names(self.client, opts)
        view = await self.look()
        report["excluded_tservers"] = view.excluded
        report["before"] = rb.summary(view.placement)
        if view.problems:
            report["refused"] = view.problems
            report.update(ok=False, balanced=False, already_balanced=False)
            return report
        if not view.placement.servers:
            report["errors"].append("no live, reachable tablet server takes part (all ignored, dead or unreachable)")
        if opts.dry_run:
            return self.dry_run(view)
        attempted = False
        cur: ClusterView | None = view
        if not opts.leaders_only:
            cur, did = await self.rounds(view, "replica")
            attempted |= did
        if cur is not None and not opts.replicas_only:
            cur, did = await self.rounds(cur, "leader")
            attempted |= did
        view = cur if cur is not None else await self.look()
        left_moves = [] if opts.leaders_only else rb.plan_replica_moves(view.placement)
        left_transfers = [] if opts.replicas_only else rb.plan_leader_transfers(view.placement)
        report["after"] = rb.summary(view.placement)
        report["left_to_do"] = {"replica_moves": len(left_moves), "leader_transfers": len(left_transfers)}
        balanced = not left_moves and not left_transfers
        report.update(
            balanced=balanced, already_balanced=balanced and not attempted, ok=balanced and not report["errors"]
        )
        return report

    def dry_run(self, view: ClusterView) -> dict[str, Any]:
        report = self.report
        moves = [] if self.opts.leaders_only else rb.plan_replica_moves(view.placement)
        projected = rb.apply_moves(view.placement, moves)
        transfers = [] if self.opts.replicas_only else rb.plan_leader_transfers(projected)
        report["replica_moves"] = [_move_entry(m, "planned") for m in moves]
        report["leader_transfers"] = [_transfer_entry(x, "planned") for x in transfers]
        report["after"] = rb.summary(rb.apply_transfers(projected, transfers))
        nothing = not moves and not transfers
        report.update(balanced=nothing, already_balanced=nothing, ok=not report["errors"])
        return report

    async def rounds(self, view: ClusterView, kind: str) -> tuple[ClusterView | None, bool]:
        """Plan and run replica moves (``kind`` "replica") or leader transfers ("leader") until done; the
        view to go on with (None: the cluster did not settle) and whether anything was attempted."""
        attempted = False
        current: ClusterView | None = view
        for rnd in range(1, MAX_ROUNDS + 1):
            assert current is not None
            if kind == "replica":
                plan: Sequence[rb.Move | rb.LeaderTransfer] = rb.plan_replica_moves(current.placement)
            else:
                plan = rb.plan_leader_transfers(current.placement)
            if not plan:
                break
            if self.deadline.remaining() <= 0:
                self.report["errors"].append(
                    f"-max_run_time_sec ({self.deadline.timeout_s:g} s) ran out before "
                    f"{kind} round {rnd} ({len(plan)} planned)"
                )
                break
            attempted = True
            self.say(f"{kind} round {rnd}: {len(plan)} {kind} {'moves' if kind == 'replica' else 'transfers'} planned")
            results = await self.execute(current, plan, kind, rnd)
            self.report["replica_moves" if kind == "replica" else "leader_transfers"].extend(results)
            current = await self.settle()
            if current is None or not any(r["status"] == "done" for r in results):
                break
        return current, attempted

    async def execute(
        self, view: ClusterView, plan: Sequence[rb.Move | rb.LeaderTransfer], kind: str, rnd: int
    ) -> list[dict[str, Any]]:
        # Where to look for a tablet's leader: its voters now, and every server the plan moves it to (a
        # tablet's second move starts after its first, which may have handed the leadership over).
        holders = {t.tablet_id: set(t.voters) for t in view.placement.tablets}
        for item in plan:
            if isinstance(item, rb.Move):
                holders[item.tablet_id].add(item.dst)
        prog = progress(
            len(plan),
            f"rebalance: {kind} round {rnd}",
            self.opts.progress,
            unit="moves" if kind == "replica" else "transfers",
            out=self.out,
        )

        async def one(item: rb.Move | rb.LeaderTransfer) -> dict[str, Any]:
            try:
                if isinstance(item, rb.Move):
                    return await self.move(item, holders[item.tablet_id], view.addresses)
                return await self.transfer(item, view.addresses)
            finally:
                prog.update(1)

        results = await run_bounded(
            list(plan),
            lambda i: (i.src, i.dst),
            lambda i: i.tablet_id,
            self.opts.max_moves_per_server,
            one,
            self.deadline,
        )
        prog.close()
        out = []
        for item, res in zip(plan, results, strict=True):
            if res is None:
                entry = _move_entry(item, "skipped") if isinstance(item, rb.Move) else _transfer_entry(item, "skipped")
                entry["error"] = "not started: -max_run_time_sec ran out"
                res = entry
            out.append(res)
        return out

    async def move(self, m: rb.Move, holders: set[str], addresses: dict[str, str]) -> dict[str, Any]:
        entry = _move_entry(m, "failed")
        rpc = self.client.rpc
        try:
            servers = [addresses[u] for u in sorted(holders) if u in addresses]
            leader = replica_util.leader_of(
                await replica_util.states(rpc, servers, m.tablet_id, self.deadline.rpc_timeout(self.opts.timeout_s)),
                m.tablet_id,
            )
            res = await replica_util.move_replica(
                self.client,
                m.tablet_id,
                m.src,
                m.dst,
                leader,
                self.deadline.left(),
                dst_address=addresses[m.dst],
                leader_to=m.leader_to,
            )
            entry.update(status="done", seconds=res["seconds"])
            if res.get("notes"):
                entry["notes"] = res["notes"]
            self.say(f"moved the replica of {m.tablet_id} ({m.table}) from {m.src} to {m.dst} in {res['seconds']} s")
        except KuduBadStatus as e:
            entry["error"] = str(e)
            self.say(f"FAILED to move the replica of {m.tablet_id} ({m.table}) from {m.src} to {m.dst}: {e}")
        return entry

    async def transfer(self, x: rb.LeaderTransfer, addresses: dict[str, str]) -> dict[str, Any]:
        entry = _transfer_entry(x, "failed")
        rpc = self.client.rpc
        timeout = self.deadline.rpc_timeout(self.opts.timeout_s)
        try:
            st = await rpc.call(addresses[x.src], "Consensus", "GetState", {"group": x.tablet_id}, timeout_s=timeout)
        except KuduBadStatus as e:
            entry["error"] = f"could not ask {x.src} for its state: {e}"
            return entry
        if st.get("role") != "LEADER":
            entry.update(status="skipped", error=f"{x.src} no longer leads (leader now {st.get('leader')})")
            return entry
        peers = {p["uuid"]: p for p in st.get("peers", [])}
        commit = st.get("commit_index") or 0

        def caught_up(u: str) -> bool:
            return (peers.get(u, {}).get("match_index") or 0) >= commit

        # Caught-up voters first (the leader would have to bring the others up to date before handing over).
        cands = sorted((x.dst, *x.alternatives), key=lambda u: not caught_up(u))
        tried: list[str] = []
        for u in cands:
            if self.deadline.remaining() <= 0:
                tried.append(f"{u}: -max_run_time_sec ran out")
                break
            if peers.get(u, {}).get("member_type") != "VOTER":
                tried.append(f"{u}: not a voter any more")
                continue
            try:
                res = await replica_util.transfer_leadership(
                    rpc,
                    addresses[x.src],
                    x.tablet_id,
                    u,
                    addresses[u],
                    min(replica_util.TRANSFER_WAIT_S, self.deadline.left()),
                )
                entry.update(status="done", to=u, term=res.get("term"))
                if tried:
                    entry["refused_by"] = tried
                self.say(f"leadership of {x.tablet_id} ({x.table}) moved from {x.src} to {u}")
                return entry
            except KuduBadStatus as e:
                tried.append(f"{u}: {e}" + ("" if caught_up(u) else " (was not caught up)"))
            # A transfer that took effect only after we stopped waiting: do not hand it on again.
            try:
                now = await rpc.call(
                    addresses[x.src],
                    "Consensus",
                    "GetState",
                    {"group": x.tablet_id},
                    timeout_s=self.deadline.rpc_timeout(self.opts.timeout_s),
                )
            except KuduBadStatus as e:
                tried.append(f"could not ask {x.src} for its state again: {e}")
                break
            if now.get("role") != "LEADER":
                entry.update(
                    status="done",
                    to=now.get("leader"),
                    refused_by=tried,
                    notes=[f"{x.src} stopped leading after the wait; leader now {now.get('leader')}"],
                )
                return entry
        entry["error"] = "no candidate took over: " + "; ".join(tried)
        self.say(f"FAILED to move the leadership of {x.tablet_id} ({x.table}) off {x.src}: {entry['error']}")
        return entry


async def run_bounded(
    items: list[T],
    servers_of: Callable[[T], tuple[str, ...]],
    key_of: Callable[[T], str],
    limit: int,
    fn: Callable[[T], Awaitable[dict[str, Any]]],
    deadline: Deadline,
) -> list[dict[str, Any] | None]:
    """Run ``fn`` on every item concurrently, with at most ``limit`` running per server named by
    ``servers_of``, and items of one ``key_of`` (a tablet) one at a time in list order; otherwise in list
    order where the bounds allow. None for items not started before the deadline."""
    results: list[dict[str, Any] | None] = [None] * len(items)
    pending = list(range(len(items)))
    busy: Counter[str] = Counter()
    running: dict[asyncio.Task[dict[str, Any]], int] = {}
    try:
        while pending or running:
            if deadline.remaining() > 0:
                blocked = {key_of(items[i]) for i in running.values()}
                for i in list(pending):
                    servers, key = servers_of(items[i]), key_of(items[i])
                    if key not in blocked and all(busy[s] < limit for s in servers):
                        busy.update(servers)
                        pending.remove(i)
                        running[asyncio.ensure_future(fn(items[i]))] = i
                    blocked.add(key)  # a later item of this key waits for this one
            if not running:
                break  # the deadline passed: what is pending stays not started
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = running.pop(task)
                busy.subtract(servers_of(items[i]))
                results[i] = task.result()
    finally:
        for task in running:
            task.cancel()
    return results


async def _check_names(client: AsyncClient, opts: RebalanceOptions) -> None:
    """Every table in -tables and every uuid in -ignored_tservers must exist: a typo would otherwise
    silently balance the wrong thing."""
    if opts.tables:
        known = set(await client.list_tables())
        unknown = [t for t in opts.tables if t not in known]
        if unknown:
            raise KuduInvalidArgument(
                f"-tables: no table named {', '.join(repr(t) for t in unknown)} "
                f"(tables: {', '.join(sorted(known)) or 'none'})"
            )
    if opts.ignored_tservers:
        known = {d["uuid"] for d in await client.list_tablet_servers()}
        unknown = sorted(opts.ignored_tservers - known)
        if unknown:
            raise KuduInvalidArgument(f"-ignored_tservers: the master knows no tablet server {', '.join(unknown)}")


def _move_entry(m: rb.Move, status: str) -> dict[str, Any]:
    e: dict[str, Any] = {
        "tablet": m.tablet_id,
        "table": m.table,
        "from": m.src,
        "to": m.dst,
        "status": status,
        "reason": m.reason,
    }
    if m.leader_to:
        e["leader_to"] = m.leader_to
    return e


def _transfer_entry(x: rb.LeaderTransfer, status: str) -> dict[str, Any]:
    return {
        "tablet": x.tablet_id,
        "table": x.table,
        "from": x.src,
        "to": x.dst,
        "status": status,
        "reason": x.reason,
        "alternatives": list(x.alternatives),
    }


async def run(client: AsyncClient, opts: RebalanceOptions) -> dict[str, Any]:
    """Rebalance (or with ``dry_run`` only plan) and return the report; ``report["ok"]`` is the verdict."""
    opts.check()
    t0 = time.monotonic()
    report = await _Run(client, opts).run()
    report["seconds"] = round(time.monotonic() - t0, 3)
    return report


# --- text report -------------------------------------------------------------------------------------------


def render(r: dict[str, Any]) -> str:
    """The plain-text report: what was (or would be) done, the counts before and after, the verdict."""
    lines: list[str] = []
    if r["refused"]:
        lines.append(
            f"refusing to rebalance: {len(r['refused'])} tablet(s) are not healthy or are changing; "
            "moving replicas now is unsafe (see `cluster ksck`):"
        )
        lines += [f"  - {p}" for p in r["refused"]]
        return "\n".join(lines)
    for key, title in (("replica_moves", "Replica moves"), ("leader_transfers", "Leader transfers")):
        if not r[key]:
            continue
        lines.append(f"{title}:")
        for e in r[key]:
            took = f"  {e['seconds']} s" if "seconds" in e else ""
            to = e.get("to", "")
            lines.append(
                f"  {e['status'].upper():<8} {e['tablet']} ({e['table']}): {e['from']} -> {to}{took}"
                + (f"  [{e['reason']}]" if e["status"] == "planned" else "")
            )
            if e.get("error"):
                lines.append(f"           {e['error']}")
            if e.get("refused_by"):
                lines.append(f"           first tried: {'; '.join(e['refused_by'])}")
            for note in e.get("notes", []):
                lines.append(f"           {note}")
    before, after = r.get("before"), r.get("after")
    if before:
        lines.append("Tablet servers" + (" (after the plan)" if r["dry_run"] else "") + ":")
        lines.append(f"  {'uuid':<34} {'replicas':>12} {'leaders':>12}")
        for u in before["replicas"]:
            rep = f"{before['replicas'][u]}"
            lead = f"{before['leaders'][u]}"
            if after:
                rep += f" -> {after['replicas'].get(u, '?')}"
                lead += f" -> {after['leaders'].get(u, '?')}"
            lines.append(f"  {u:<34} {rep:>12} {lead:>12}")
    for u, why in sorted(r.get("excluded_tservers", {}).items()):
        lines.append(f"  {u:<34} not balanced: {why}")
    lines += [f"ERROR: {e}" for e in r["errors"]]
    lines.append(verdict(r))
    return "\n".join(lines)


def verdict(r: dict[str, Any]) -> str:
    moves = [e for e in r["replica_moves"] if e["status"] == "done"]
    transfers = [e for e in r["leader_transfers"] if e["status"] == "done"]
    failed = [e for e in r["replica_moves"] + r["leader_transfers"] if e["status"] in ("failed", "skipped")]
    if r["dry_run"]:
        if r["already_balanced"]:
            return "dry run: the cluster is already balanced; nothing to do"
        return (
            f"dry run: {len(r['replica_moves'])} replica move(s) and {len(r['leader_transfers'])} leader "
            "transfer(s) planned; nothing was changed"
        )
    if r["already_balanced"] and r["ok"]:
        return "the cluster was already balanced; nothing to do"
    done = f"{len(moves)} replica move(s) and {len(transfers)} leader transfer(s) done"
    if r["ok"]:
        tail = f"; {len(failed)} failed or skipped but retried" if failed else ""
        return f"the cluster is balanced: {done}{tail}"
    left = r.get("left_to_do", {})
    return (
        f"NOT balanced (exit status 1): {done}, {len(failed)} failed or skipped; still to do: "
        f"{left.get('replica_moves', '?')} replica move(s), {left.get('leader_transfers', '?')} leader "
        "transfer(s)"
    )

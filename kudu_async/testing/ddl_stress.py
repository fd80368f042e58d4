"""DDL under leader-master kills: the stress test Kudu 1.0's master fault-tolerance post names as missing.

Workers run CreateTable / AlterTable (add a column, rename) / DeleteTable in a loop against a MiniCluster
while the leader master is killed (``kill -9``) every few seconds and restarted. Every DDL carries a
request id and is retried across masters under it until acknowledged or its deadline passes; a DDL whose
outcome is unknown at the deadline freezes its table for the rest of the run and is resent under the same
id once the kills stop, so its outcome becomes known (the request id makes that resend safe).

Each worker keeps a model of its own tables from the replies it was given. At the end, with every master
up and the catalog's background work done, the cluster must match the models exactly: every acknowledged
CreateTable's table exists once under one id, every acknowledged alter is there once (its column once, the
schema version bumped once per added column), every acknowledged delete is gone, every table is RUNNING,
and the tservers hold exactly the replicas of the catalog's tablets (no orphans of deleted tables).

Used by ``tests/integration/test_ddl_stress.py`` (short) and ``scripts/stress/ddl_under_master_kills.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduBadStatus, KuduNotFound, KuduTimedOut
from kudu_async.common.partition import HashDimension, PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.common.types import type_from_name
from kudu_async.rpc.client import RpcClient
from kudu_async.testing.master_client import LeaderMasterClient
from kudu_async.testing.mini_cluster import MiniCluster, NodeProcess

BASE_COLUMNS = ["key", "val"]
SCHEMA = Schema(
    [ColumnSchema("key", type_from_name("int64"), nullable=False), ColumnSchema("val", type_from_name("string"))], 1
)


@dataclass
class DdlStressConfig:
    duration_s: float = 40.0  # how long DDL runs under kills
    workers: int = 3  # concurrent clients, each with its own tables and request-id space
    tables_per_worker: int = 3  # live tables a worker keeps at most
    hash_buckets: int = 2  # tablets per table (x 3 replicas)
    num_replicas: int = 3
    kill_every_s: tuple[float, float] = (3.0, 5.0)  # between leader kills
    # Aim each kill at a DDL in flight (waiting up to 1 s for one to start, then 0-3 ms), so that some are
    # committed and never answered: the case request ids exist for.
    aim_kills_at_ddl: bool = True
    restart_after_s: tuple[float, float] = (0.3, 1.0)  # a killed master is started again after this
    ddl_timeout_s: float = 30.0  # one DDL's retries across masters
    wait_created_s: float = 20.0  # a worker waits this long for IsCreateTableDone before moving on
    resend_probability: float = 0.15  # per step: resend an acknowledged DDL, as if its reply had been lost
    settle_timeout_s: float = 120.0  # after the run: for the catalog and tservers to reach the final state
    seed: int | None = None


@dataclass
class TableModel:
    worker: int
    table_id: str
    name: str
    columns: list[str] = field(default_factory=lambda: list(BASE_COLUMNS))
    schema_version: int = 0
    created: bool = False  # IsCreateTableDone said done
    deleted: bool = False
    frozen: bool = False  # a DDL on it has an unknown outcome: untouched until resolved


@dataclass
class Unresolved:
    """A DDL without an answer at its deadline, resent after the kills stop."""

    worker: int
    method: str
    req: dict[str, Any]
    table: TableModel | None  # None for a CreateTable


@dataclass
class DdlStressReport:
    attempted: Counter[str] = field(default_factory=Counter)  # DDL requests started (one per request id)
    acknowledged: Counter[str] = field(default_factory=Counter)  # answered with success during the load
    retried: int = 0  # DDL requests that needed more than one RPC
    retry_rpcs: int = 0  # RPCs beyond each DDL's first
    timed_out: int = 0  # DDL without an answer at its deadline (resolved after the run)
    resolved_after: int = 0
    resends: int = 0  # acknowledged DDL sent again under their request id
    dedup_answers: int = 0  # retries the masters answered from the catalog (their logs)
    kills: int = 0
    kills_mid_ddl: int = 0  # kills while a DDL RPC was in flight
    leader_changes: int = 0  # new leader terms seen (the same master re-elected counts)
    max_leaderless_s: float = 0.0
    leaderless_s: float = 0.0
    load_s: float = 0.0
    settle_s: float = 0.0
    tables_live: int = 0
    tables_deleted: int = 0
    replicas_checked: int = 0
    violations: list[str] = field(default_factory=list)
    diagnostics: list[str] = field(default_factory=list)  # the cluster's state when there are violations

    def lines(self) -> list[str]:
        att, ack = sum(self.attempted.values()), sum(self.acknowledged.values())
        return [
            f"load {self.load_s:.1f}s, settle {self.settle_s:.1f}s",
            f"DDL attempted {att} ({_fmt(self.attempted)}), acknowledged {ack} ({_fmt(self.acknowledged)})",
            f"DDL retried {self.retried} ({self.retry_rpcs} extra RPCs), timed out {self.timed_out} "
            f"(resolved after the run {self.resolved_after}), resent after ack {self.resends}, "
            f"answered from the catalog's request ids {self.dedup_answers}",
            f"leader masters killed {self.kills} ({self.kills_mid_ddl} with a DDL in flight), "
            f"new leader terms seen {self.leader_changes}, "
            f"max time without a leader {self.max_leaderless_s:.2f}s (total {self.leaderless_s:.1f}s)",
            f"final: {self.tables_live} tables live, {self.tables_deleted} deleted, "
            f"{self.replicas_checked} tablet replicas checked on the tservers",
            f"violations: {len(self.violations)}",
            *(f"  - {v}" for v in self.violations[:50]),
            *(["diagnostics:", *(f"  {d}" for d in self.diagnostics)] if self.diagnostics else []),
        ]


def _fmt(c: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


class DdlStress:
    def __init__(
        self, cluster: MiniCluster, config: DdlStressConfig, progress: Callable[[str], None] | None = None
    ) -> None:
        if len(cluster.masters) < 3:
            raise ValueError("killing the leader master needs at least 3 masters")
        self.cluster = cluster
        self.config = config
        self.progress = progress or (lambda _msg: None)
        self.rng = random.Random(config.seed)
        self.report = DdlStressReport()
        self.tables: list[TableModel] = []
        self.acked: list[tuple[int, str, dict[str, Any], dict[str, Any]]] = []  # worker, method, req, reply
        self.unresolved: list[Unresolved] = []
        self.rpc = RpcClient("ddl-stress")
        self.pschema = PartitionSchema(SCHEMA, [HashDimension(["key"], config.hash_buckets)], ["key"])
        self._stop = asyncio.Event()
        self._end = 0.0
        self._ddl_in_flight = 0
        self._ddl_started = asyncio.Event()

    def live_master_addresses(self) -> list[str]:
        return [m.rpc_address for m in self.cluster.masters if m.is_running()]

    def client(self, worker: int) -> LeaderMasterClient:
        return LeaderMasterClient(
            self.rpc, self.live_master_addresses, client_id=f"ddl-stress-w{worker}", rpc_timeout_s=5.0
        )

    # --- the run ------------------------------------------------------------------------------------

    async def run(self) -> DdlStressReport:
        try:
            admin = self.client(99)
            await admin.call("ListTables", {}, timeout_s=60.0)  # a leader exists before the clock starts
            t0 = time.monotonic()
            self._end = t0 + self.config.duration_s
            monitor = asyncio.create_task(self._monitor(), name="leader-monitor")
            killer = asyncio.create_task(self._killer(), name="leader-killer")
            workers = [asyncio.create_task(self._worker(i), name=f"ddl-worker-{i}") for i in range(self.config.workers)]
            try:
                await asyncio.gather(*workers)
                self._stop.set()
                await killer
            finally:
                self._stop.set()
                for t in (*workers, killer):
                    t.cancel()
                await asyncio.gather(*workers, killer, return_exceptions=True)
                await self._restart_dead_masters()
            self.report.load_s = time.monotonic() - t0
            t1 = time.monotonic()
            await self._resolve_unresolved(admin)
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)
            await self._verify(admin)
            self.report.settle_s = time.monotonic() - t1
            self.report.dedup_answers = self._count_dedup_answers()
            return self.report
        finally:
            await self.rpc.close()

    async def _restart_dead_masters(self) -> None:
        for m in self.cluster.masters:
            if not m.is_running():
                await asyncio.to_thread(self.cluster.restart_node, m)

    # --- leader kills and leadership monitor ---------------------------------------------------------

    async def _leader(self, timeout_s: float = 0.5) -> tuple[NodeProcess, str, int] | None:
        """The master that says it leads the catalog now, if one does: (node, uuid, its term)."""
        running = [m for m in self.cluster.masters if m.is_running()]

        async def ask(m: NodeProcess) -> dict[str, Any] | None:
            try:
                reply: dict[str, Any] = await self.rpc.call(
                    m.rpc_address, "Master", "ConnectToMaster", {}, timeout_s=timeout_s
                )
                return reply
            except KuduBadStatus:
                return None

        answers = await asyncio.gather(*(ask(m) for m in running))
        for m, a in zip(running, answers, strict=True):
            if a is not None and a.get("leader"):
                return m, str(a["uuid"]), int(a.get("term") or 0)
        return None

    async def _killer(self) -> None:
        """kill -9 the leader every ``kill_every_s`` (counted from the previous kill, once there is a leader
        again); each killed master is started again ``restart_after_s`` later, in the background."""
        lo, hi = self.config.kill_every_s
        restarts: list[asyncio.Task[None]] = []
        next_kill = time.monotonic() + self.rng.uniform(lo, hi)
        try:
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), max(0.0, next_kill - time.monotonic()))
                if self._stop.is_set() or time.monotonic() >= self._end:
                    return
                found = await self._leader()
                if found is None:
                    await asyncio.sleep(0.1)
                    continue
                node, uuid, _ = found
                if self.config.aim_kills_at_ddl:
                    self._ddl_started.clear()
                    if not self._ddl_in_flight:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._ddl_started.wait(), 1.0)
                    await asyncio.sleep(self.rng.uniform(0.0, 0.003))
                mid_ddl = self._ddl_in_flight > 0
                if node.proc is not None:
                    node.proc.kill()  # SIGKILL now, from the loop; kill_node below reaps it
                await asyncio.to_thread(self.cluster.kill_node, node)
                self.report.kills += 1
                self.report.kills_mid_ddl += mid_ddl
                next_kill = time.monotonic() + self.rng.uniform(lo, hi)
                self.progress(f"[{self._clock()}] killed leader master {node.name} ({uuid[:8]})")
                restarts.append(asyncio.create_task(self._restart_later(node)))
        finally:
            await asyncio.gather(*restarts, return_exceptions=True)

    async def _restart_later(self, node: NodeProcess) -> None:
        await asyncio.sleep(self.rng.uniform(*self.config.restart_after_s))
        await asyncio.to_thread(self.cluster.restart_node, node)

    async def _monitor(self) -> None:
        last_leader_at = time.monotonic()
        last: tuple[str, int] | None = None
        prev = time.monotonic()
        while True:
            found = await self._leader()
            now = time.monotonic()
            if found is not None:
                # A new leadership is a new term, whoever holds it: a killed leader restarted in time may win
                # the election again, which a change of uuid alone would not count.
                if last is not None and (found[1], found[2]) != last:
                    self.report.leader_changes += 1
                last = (found[1], found[2])
                last_leader_at = now
            else:
                self.report.leaderless_s += now - prev
                self.report.max_leaderless_s = max(self.report.max_leaderless_s, now - last_leader_at)
            prev = now
            await asyncio.sleep(0.1)

    def _clock(self) -> str:
        return f"{self.config.duration_s - max(0.0, self._end - time.monotonic()):5.1f}s"

    # --- workers ------------------------------------------------------------------------------------

    async def _worker(self, w: int) -> None:
        client = self.client(w)
        n_created = 0
        while time.monotonic() < self._end:
            mine = [t for t in self.tables if t.worker == w and not t.deleted and not t.frozen]
            pending_create = any(u.worker == w and u.method == "CreateTable" for u in self.unresolved)
            for t in mine:
                if not t.created:
                    t.created = await self._is_created(client, t)
            alterable = [t for t in mine if t.created]
            roll = self.rng.random()
            if self.acked and roll < self.config.resend_probability:
                await self._resend(client, w)
            elif len(mine) + pending_create < self.config.tables_per_worker and (not mine or roll < 0.45):
                n_created += 1
                await self._create(client, w, f"w{w}-t{n_created}")
            elif alterable and roll < 0.70:
                await self._add_column(client, self.rng.choice(alterable))
            elif alterable and roll < 0.85:
                await self._rename(client, self.rng.choice(alterable))
            elif mine:
                await self._delete(client, self.rng.choice(mine))
            else:
                await asyncio.sleep(0.1)

    async def _is_created(self, client: LeaderMasterClient, t: TableModel) -> bool:
        try:
            reply = await client.call("IsCreateTableDone", {"table_id": t.table_id}, timeout_s=2.0)
        except KuduTimedOut:
            return False
        return bool(reply.get("done"))

    async def _ddl(
        self, client: LeaderMasterClient, w: int, method: str, req: dict[str, Any], table: TableModel | None
    ) -> dict[str, Any] | None:
        """One DDL under a new request id; the reply, or None if its outcome is unknown at the deadline
        (the table is then frozen until the resend after the run) or it was refused (a violation: every
        DDL the workers send is valid for their model)."""
        req = {**req, "request_id": client.new_request_id()}
        self.report.attempted[method] += 1
        before = client.stats.attempts
        self._ddl_in_flight += 1
        self._ddl_started.set()
        try:
            reply = await client.ddl(method, req, self.config.ddl_timeout_s)
        except KuduTimedOut as e:
            self.report.timed_out += 1
            self.unresolved.append(Unresolved(w, method, req, table))
            if table is not None:
                table.frozen = True
            self.progress(f"[{self._clock()}] {method} {req['request_id']}: no answer in time ({e}); resent later")
            return None
        except KuduBadStatus as e:
            self.report.violations.append(f"{method} {_brief(req)} refused: {e}")
            return None
        finally:
            self._ddl_in_flight -= 1
            extra = client.stats.attempts - before - 1
            if extra > 0:
                self.report.retried += 1
                self.report.retry_rpcs += extra
        self.report.acknowledged[method] += 1
        self.acked.append((w, method, req, reply))
        return reply

    async def _create(self, client: LeaderMasterClient, w: int, name: str) -> None:
        req = {
            "name": name,
            "schema": SCHEMA.to_dict(),
            "partition_schema": self.pschema.to_dict(),
            "num_replicas": self.config.num_replicas,
        }
        reply = await self._ddl(client, w, "CreateTable", req, None)
        if reply is not None:
            t = self._model_create(w, name, reply)
            with contextlib.suppress(KuduBadStatus):
                await client.wait_done(
                    "IsCreateTableDone",
                    {"table_id": t.table_id},
                    min(self.config.wait_created_s, max(0.1, self._end - time.monotonic())),
                )
                t.created = True

    def _model_create(self, w: int, name: str, reply: dict[str, Any]) -> TableModel:
        t = TableModel(w, str(reply["table_id"]), name)
        self.tables.append(t)
        return t

    async def _add_column(self, client: LeaderMasterClient, t: TableModel) -> None:
        col = f"c{t.schema_version + 1}"
        req = {"name": t.name, "alter_schema_steps": [{"type": "ADD_COLUMN", "column": {"name": col, "type": "int32"}}]}
        reply = await self._ddl(client, t.worker, "AlterTable", req, t)
        if reply is not None:
            self._model_apply(t, "AlterTable", req, reply)

    async def _rename(self, client: LeaderMasterClient, t: TableModel) -> None:
        base = t.name.split("~")[0]
        req = {"name": t.name, "new_name": f"{base}~{self.report.attempted['AlterTable'] + 1}"}
        reply = await self._ddl(client, t.worker, "AlterTable", req, t)
        if reply is not None:
            self._model_apply(t, "AlterTable", req, reply)

    async def _delete(self, client: LeaderMasterClient, t: TableModel) -> None:
        req = {"name": t.name}
        reply = await self._ddl(client, t.worker, "DeleteTable", req, t)
        if reply is not None:
            self._model_apply(t, "DeleteTable", req, reply)

    def _model_apply(self, t: TableModel, method: str, req: dict[str, Any], reply: dict[str, Any]) -> None:
        """The worker's model after an acknowledged DDL on ``t``; a reply that contradicts it is a violation."""
        if reply.get("table_id") != t.table_id:
            self.report.violations.append(
                f"{method} {_brief(req)} answered for table {reply.get('table_id')}, not {t.table_id}"
            )
        if method == "DeleteTable":
            t.deleted = True
            return
        if req.get("new_name"):
            t.name = req["new_name"]
        for step in req.get("alter_schema_steps", []):
            t.columns.append(step["column"]["name"])
            t.schema_version += 1
        if reply.get("schema_version") != t.schema_version:
            self.report.violations.append(
                f"{method} {_brief(req)} answered schema_version "
                f"{reply.get('schema_version')}, the model has {t.schema_version}"
            )

    async def _resend(self, client: LeaderMasterClient, w: int) -> None:
        """Send an acknowledged DDL again under its request id (its reply lost, say): the same answer,
        whatever happened to the table since, and nothing applied twice."""
        mine = [a for a in self.acked if a[0] == w]
        if not mine:
            return
        _, method, req, reply = self.rng.choice(mine)
        self.report.resends += 1
        try:
            again = await client.call(method, req, self.config.ddl_timeout_s)
        except KuduTimedOut:
            return  # nothing to learn without an answer; nothing can have changed either
        except KuduBadStatus as e:
            self.report.violations.append(f"resent {method} {req['request_id']} refused: {e}")
            return
        if again != reply:
            self.report.violations.append(f"resent {method} {req['request_id']} answered {again}, first {reply}")

    # --- after the run -------------------------------------------------------------------------------

    async def _resolve_unresolved(self, admin: LeaderMasterClient) -> None:
        """Resend every DDL whose outcome is unknown under its request id: applied then or now, once."""
        for u in self.unresolved:
            try:
                reply = await admin.call(u.method, u.req, 60.0)
            except KuduBadStatus as e:
                self.report.violations.append(f"{u.method} {u.req['request_id']} could not be resolved: {e}")
                continue
            self.report.resolved_after += 1
            if u.table is None:
                self._model_create(u.worker, u.req["name"], reply)
            else:
                self._model_apply(u.table, u.method, u.req, reply)
                u.table.frozen = False

    async def _leader_node(self) -> NodeProcess:
        deadline = time.monotonic() + 60
        while True:
            found = await self._leader(timeout_s=2.0)
            if found is not None:
                return found[0]
            if time.monotonic() > deadline:
                raise KuduTimedOut("no leader master within 60s after the run")
            await asyncio.sleep(0.2)

    async def _catalog_tables(self) -> list[dict[str, Any]]:
        """Every table record on the leader, whatever its state (``/api/v1/catalog/tables``)."""
        node = await self._leader_node()
        doc = await asyncio.to_thread(self.cluster.http_json, node, "/api/v1/catalog/tables")
        return list(doc["tables"])

    async def _verify(self, admin: LeaderMasterClient) -> None:
        cfg = self.config
        live = [t for t in self.tables if not t.deleted]
        deleted = [t for t in self.tables if t.deleted]
        self.report.tables_live, self.report.tables_deleted = len(live), len(deleted)
        deadline = time.monotonic() + cfg.settle_timeout_s
        # 1. The catalog's background work finishes: every table RUNNING, deleted ones gone.
        while True:
            tables = await self._catalog_tables()
            busy = [t for t in tables if t["state"] != "RUNNING"]
            if not busy or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        v = self.report.violations
        v += [
            f"table {t['name']} ({t['table_id']}) still {t['state']} {cfg.settle_timeout_s:g}s after the run"
            for t in busy
        ]
        # 2. The catalog holds exactly the tables the models hold.
        names = Counter(t["name"] for t in tables)
        v += [f"{n} tables are named {name!r}" for name, n in names.items() if n > 1]
        by_id = {t["table_id"]: t for t in tables}
        for t in live:
            rec = by_id.get(t.table_id)
            if rec is None:
                v.append(f"acknowledged CreateTable of {t.name} ({t.table_id}) is lost")
                continue
            if rec["name"] != t.name:
                v.append(f"table {t.table_id} is named {rec['name']!r}, acknowledged renames make it {t.name!r}")
            try:
                schema = await admin.call("GetTableSchema", {"table_id": t.table_id}, 30.0)
            except KuduBadStatus as e:
                v.append(f"GetTableSchema {t.table_id}: {e}")
                continue
            cols = [c["name"] for c in schema["schema"]["columns"]]
            if cols != t.columns:
                v.append(f"table {t.name} has columns {cols}, acknowledged alters make them {t.columns}")
            if schema["schema_version"] != t.schema_version:
                v.append(
                    f"table {t.name} is at schema version {schema['schema_version']}, acknowledged alters "
                    f"make it {t.schema_version}"
                )
        for t in deleted:
            if t.table_id in by_id:
                v.append(
                    f"acknowledged DeleteTable of {t.name} ({t.table_id}) is lost: still {by_id[t.table_id]['state']}"
                )
            with contextlib.suppress(KuduNotFound):
                await admin.call("GetTableSchema", {"table_id": t.table_id}, 30.0)
                v.append(f"deleted table {t.table_id} still answers GetTableSchema")
        known = {t.table_id for t in self.tables}
        v += [
            f"table {t['name']} ({t['table_id']}) was never acknowledged to any worker (applied twice?)"
            for t in tables
            if t["table_id"] not in known
        ]
        # 3. The tservers hold exactly the replicas of the catalog's tablets.
        await self._verify_replicas(admin, live, deadline)
        if v:
            self.report.diagnostics = await self._diagnostics([t for t in tables if t["state"] != "RUNNING"])

    async def _diagnostics(self, busy: list[dict[str, Any]]) -> list[str]:
        """What the masters and tservers say, for a run that failed (tables stuck, replicas off)."""
        out: list[str] = []
        for m in self.cluster.masters:
            for path in ("/api/v1/status", "/api/v1/tservers"):
                try:
                    doc = await asyncio.to_thread(self.cluster.http_json, m, path)
                except Exception as e:  # a diagnostic must not hide the failure it explains
                    doc = f"unavailable: {e}"
                out.append(f"{m.name} {path}: {doc}")
        node = await self._leader_node()
        for t in busy:
            try:
                doc = await asyncio.to_thread(self.cluster.http_json, node, f"/api/v1/catalog/tables/{t['name']}")
            except Exception as e:
                doc = f"unavailable: {e}"
            out.append(f"leader {node.name} /api/v1/catalog/tables/{t['name']}: {doc}")
        for ts in self.cluster.tservers:
            try:
                reply = await self.rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {}, timeout_s=10.0)
                out.append(
                    f"{ts.name} ({ts.uuid[:8]}) tablets: "
                    + ", ".join(
                        f"{r['tablet_id'][:8]}:{r['state']}:{r.get('role')}:v{r.get('schema_version')}"
                        for r in reply["tablets"]
                    )
                )
            except KuduBadStatus as e:
                out.append(f"{ts.name} ListTablets: {e}")
        return out

    async def _verify_replicas(self, admin: LeaderMasterClient, live: list[TableModel], deadline: float) -> None:
        while True:
            problems, checked = await self._replica_problems(admin, live)
            if not problems or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        self.report.replicas_checked = checked
        self.report.violations.extend(problems)

    async def _replica_problems(self, admin: LeaderMasterClient, live: list[TableModel]) -> tuple[list[str], int]:
        expected: dict[tuple[str, str], int] = {}  # (tserver uuid, tablet) -> schema version
        problems: list[str] = []
        for t in live:
            locs = (await admin.call("GetTableLocations", {"table_id": t.table_id}, 30.0))["tablets"]
            if len(locs) != self.config.hash_buckets:
                problems.append(f"table {t.name} has {len(locs)} tablets, not {self.config.hash_buckets}")
            for loc in locs:
                roles = sorted(r["role"] for r in loc["replicas"])
                want = ["FOLLOWER"] * (self.config.num_replicas - 1) + ["LEADER"]
                if roles != want:
                    problems.append(f"tablet {loc['tablet_id']} of {t.name} has replicas {roles}")
                for r in loc["replicas"]:
                    expected[(r["uuid"], loc["tablet_id"])] = t.schema_version
        held: dict[tuple[str, str], dict[str, Any]] = {}
        for ts in self.cluster.tservers:
            reply = await self.rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {}, timeout_s=10.0)
            for rep in reply["tablets"]:
                held[(ts.uuid, rep["tablet_id"])] = rep
        for key in sorted(set(held) - set(expected)):
            problems.append(
                f"tserver {key[0][:8]} holds tablet {key[1]} ({held[key].get('table_name')}, "
                f"{held[key]['state']}) that no live table of the catalog has"
            )
        for key in sorted(set(expected) - set(held)):
            problems.append(f"tserver {key[0][:8]} lacks tablet {key[1]} of the catalog")
        for key in sorted(set(expected) & set(held)):
            rep = held[key]
            if rep["state"] != "RUNNING" or rep.get("schema_version") != expected[key]:
                problems.append(
                    f"tserver {key[0][:8]} tablet {key[1]}: {rep['state']} at schema version "
                    f"{rep.get('schema_version')}, expected RUNNING at {expected[key]}"
                )
        return problems, len(held)

    def _count_dedup_answers(self) -> int:
        """Retries the masters answered from their request ids (each logs one line; logs are appended)."""
        n = 0
        for m in self.cluster.masters:
            with contextlib.suppress(OSError):
                n += m.log_path.read_text(errors="replace").count("DDL retry answered from the catalog")
        return n


def _brief(req: dict[str, Any]) -> str:
    keys = ("name", "new_name", "request_id")
    return "{" + ", ".join(f"{k}={req[k]}" for k in keys if k in req) + "}"


async def run_ddl_stress(
    cluster: MiniCluster, config: DdlStressConfig, progress: Callable[[str], None] | None = None
) -> DdlStressReport:
    return await DdlStress(cluster, config, progress).run()

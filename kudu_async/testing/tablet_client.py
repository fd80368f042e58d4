"""A minimal tablet-level client for tests and benchmarks: tablets created and driven by direct RPC.

It knows no master and no partitioning (the real client does); it finds a tablet's leader by asking
the replicas, retries what a client retries (NOT_THE_LEADER, unavailable, timed out) within a deadline,
and moves rows as Arrow, as the real client does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from kudu_async.common.errors import KuduBadStatus, KuduNotTheLeader, KuduTimedOut
from kudu_async.common.retry import REPLICA_RETRYABLE, Backoff, BackoffPolicy, leader_hint
from kudu_async.common.row_conversion import encode_row_operations, ipc_to_table
from kudu_async.common.schema import Schema
from kudu_async.rpc.client import RpcClient

LEADER_BACKOFF = BackoffPolicy(initial_s=0.02, max_s=0.5)
INSERT, UPDATE, DELETE, UPSERT = 1, 2, 3, 5


class TabletClient:
    """Drives one tablet whose replicas live at ``addresses`` (uuid -> RPC address)."""

    def __init__(self, rpc: RpcClient, tablet_id: str, schema: Schema, addresses: dict[str, str]) -> None:
        self.rpc = rpc
        self.tablet_id = tablet_id
        self.schema = schema
        self.addresses = dict(addresses)
        self.leader: str | None = None
        self.schema_version = 0

    async def create(self, table_id: str = "t1", table_name: str = "test") -> None:
        req = {
            "tablet_id": self.tablet_id,
            "table_id": table_id,
            "table_name": table_name,
            "schema": self.schema.to_dict(),
            "peers": self.addresses,
        }
        await asyncio.gather(*(self.rpc.call(a, "TabletServer", "CreateTablet", req) for a in self.addresses.values()))

    async def status(self, address: str) -> dict[str, Any]:
        reply: dict[str, Any] = await self.rpc.call(
            address, "Consensus", "GetState", {"group": self.tablet_id}, timeout_s=2.0
        )
        return reply

    async def wait_leader(self, timeout_s: float = 15.0, exclude: Sequence[str] = ()) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for addr in self.addresses.values():
                if addr in exclude:
                    continue
                try:
                    st = await self.status(addr)
                except KuduBadStatus:
                    continue
                if st.get("role") == "LEADER":
                    self.leader = addr
                    return addr
            await asyncio.sleep(0.05)
        raise KuduTimedOut(f"no leader for {self.tablet_id} within {timeout_s}s")

    async def _call_leader(self, method: str, req: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        backoff = Backoff(LEADER_BACKOFF)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KuduTimedOut(f"{method} on {self.tablet_id}: no success within {timeout_s}s")
            addr = self.leader
            try:
                if addr is None:
                    addr = await self.wait_leader(min(remaining, 5.0))
                reply: dict[str, Any] = await self.rpc.call(
                    addr, "TabletServer", method, req, timeout_s=min(remaining, 10.0)
                )
                return reply
            except KuduNotTheLeader as e:
                self.leader = leader_hint(e, self.addresses.values(), addr)
            except REPLICA_RETRYABLE:  # NOT_FOUND: a replica may not have created the tablet yet
                self.leader = None
            await backoff.sleep()

    async def write(self, rows: pa.RecordBatch, op: int = INSERT, timeout_s: float = 30.0) -> dict[str, Any]:
        """Write one batch (all rows the same op) to the leader, retrying until acknowledged.

        This small client sends no request id, so a retried batch may have been applied already (its first
        reply lost): callers that count rows use idempotent ops (UPSERT) or tolerate ALREADY_PRESENT. (The
        real client's sessions send request ids and get exactly-once writes.)
        """
        req = {
            "tablet_id": self.tablet_id,
            "schema_version": self.schema_version,
            **encode_row_operations(rows, [op] * rows.num_rows),
        }
        return await self._call_leader("Write", req, timeout_s)

    async def scan(
        self,
        address: str | None = None,
        *,
        read_mode: str = "READ_LATEST",
        snapshot_ts: int | None = None,
        ordered: bool = True,
        projection: list[str] | None = None,
        predicates: list[dict[str, Any]] | None = None,
        batch_bytes: int | None = None,
        timeout_s: float = 30.0,
    ) -> tuple[pa.Table, int | None]:
        """Every row of the scan as one table, and the snapshot timestamp used (None for READ_LATEST)."""
        req: dict[str, Any] = {"tablet_id": self.tablet_id, "read_mode": read_mode, "ordered": ordered}
        for k, v in (
            ("snapshot_ts", snapshot_ts),
            ("projection", projection),
            ("predicates", predicates),
            ("batch_bytes", batch_bytes),
        ):
            if v is not None:
                req[k] = v
        if address is None:
            first = await self._call_leader("Scan", req, timeout_s)
            address = self.leader
        else:
            first = await self.rpc.call(address, "TabletServer", "Scan", req, timeout_s=timeout_s)
        assert address is not None
        tables = [ipc_to_table(first["data"])]
        reply = first
        while reply.get("has_more"):
            reply = await self.rpc.call(
                address, "TabletServer", "Scan", {"scanner_id": reply["scanner_id"]}, timeout_s=timeout_s
            )
            tables.append(ipc_to_table(reply["data"]))
        return pa.concat_tables(tables), first.get("snapshot_ts")

    async def checksum(self, address: str, snapshot_ts: int | None = None, timeout_s: float = 30.0) -> dict[str, Any]:
        req: dict[str, Any] = {"tablet_id": self.tablet_id}
        if snapshot_ts is not None:
            req["snapshot_ts"] = snapshot_ts
        reply: dict[str, Any] = await self.rpc.call(address, "TabletServer", "Checksum", req, timeout_s=timeout_s)
        return reply

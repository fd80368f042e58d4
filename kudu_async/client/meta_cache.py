"""Where things are: the leader master, and each table's tablets with their replicas (cached, expiring).

The client asks the masters only when it must: on first use of a table, when a cached entry expires
(``LOCATION_TTL_S``), or when a tablet server says the cache is wrong (tablet not found there, no
leader among the replicas it knows). Tablet leaders are learned from the master's answer and corrected
by NOT_THE_LEADER hints, so a leader change costs one extra RPC, not a master round trip.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduInvalidArgument,
    KuduNotAuthorized,
    KuduNotTheLeader,
    KuduTimedOut,
)
from kudu_async.common.partition import Partition
from kudu_async.common.retry import RETRYABLE, Deadline, leader_hint
from kudu_async.rpc.client import RpcClient

COMPARE_MAX_TABLETS = 32  # up to this many tablets, assign() compares many distinct keys with every start
FEW_DISTINCT_KEYS = 256  # up to this many distinct partition keys in a batch, assign() searches them in Python

log = logging.getLogger(__name__)

LOCATION_TTL_S = 300.0
# A client that calls the leader master asks it for the list of masters again once the list it holds is
# this old (one ConnectToMaster, in the background): a master added since is known before the ones the
# client knew are gone.
MASTER_LIST_REFRESH_S = 5.0


def parse_master_addresses(addresses: Sequence[str]) -> list[str]:
    out = []
    for a in addresses:
        if not isinstance(a, str) or ":" not in a:
            raise KuduInvalidArgument(f"master address {a!r} must be 'host:port'")
        host, _, port = a.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise KuduInvalidArgument(f"master address {a!r} must be 'host:port' with a port in 1..65535")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise KuduInvalidArgument("at least one master address is needed")
    return list(dict.fromkeys(out))


class MasterClient:
    """Calls on the leader master, finding it (and re-finding it after a failover) by itself.

    The leader's ``ConnectToMaster`` answer lists every master of the cluster: ``addresses`` follows it (in
    place, so whoever shares the list sees it too), so masters added or removed while the client runs are
    found without a new client. The list is asked for again, in the background, by a call to the leader
    once it is ``MASTER_LIST_REFRESH_S`` old."""

    def __init__(self, rpc: RpcClient, addresses: Sequence[str], rpc_timeout_s: float) -> None:
        self.rpc = rpc
        self.addresses = parse_master_addresses(addresses)
        self.rpc_timeout_s = rpc_timeout_s
        self.leader: str | None = None
        self._errors: dict[str, str] = {}  # why each master did not answer, for the timeout message
        self._listed_at = time.monotonic()
        self._refresh: asyncio.Task[None] | None = None

    async def call(self, method: str, req: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        last: BaseException | None = None
        while True:
            deadline.left(last)
            addr = self.leader or await self._find_leader(deadline)
            if addr is not None:
                try:
                    reply: dict[str, Any] = await self.rpc.call(
                        addr, "Master", method, req, timeout_s=deadline.rpc_timeout(self.rpc_timeout_s)
                    )
                    self.leader = addr
                    self._maybe_refresh(addr)
                    return reply
                except KuduNotTheLeader as e:
                    last = e
                    self.leader = leader_hint(e, self.addresses, addr)
                except RETRYABLE as e:
                    last = e
                    self.leader = None
            else:
                last = self._no_leader()
            await deadline.backoff(last)

    def _maybe_refresh(self, leader: str) -> None:
        if time.monotonic() - self._listed_at < MASTER_LIST_REFRESH_S or (
            self._refresh is not None and not self._refresh.done()
        ):
            return
        self._listed_at = time.monotonic()
        self._refresh = asyncio.get_running_loop().create_task(self._refresh_list(leader))

    async def _refresh_list(self, leader: str) -> None:
        try:
            ans = await self.rpc.call(leader, "Master", "ConnectToMaster", {}, timeout_s=min(self.rpc_timeout_s, 3.0))
        except KuduBadStatus:
            return  # the next call that finds the leader lists the masters again
        if isinstance(ans, dict) and ans.get("leader"):
            self._follow_masters(leader, ans.get("masters"))

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            await asyncio.gather(self._refresh, return_exceptions=True)

    def _follow_masters(self, leader: str, masters: Any) -> None:
        """Take the leader's list of masters as the ones to ask from now on (the leader kept first if the
        list names it otherwise); a malformed list is ignored."""
        if not isinstance(masters, list):
            return
        self._listed_at = time.monotonic()
        try:
            listed = parse_master_addresses(
                [m["rpc_address"] for m in masters if isinstance(m, dict) and m.get("rpc_address")]
            )
        except (KuduInvalidArgument, KeyError, TypeError):
            return
        if leader not in listed:
            listed.insert(0, leader)
        if set(listed) != set(self.addresses):
            log.info("the masters changed", extra={"before": list(self.addresses), "after": listed})
            self.addresses[:] = listed

    def _no_leader(self) -> KuduNotTheLeader:
        why = "; ".join(f"{a}: {e}" for a, e in self._errors.items())
        return KuduNotTheLeader(f"no leader master among {', '.join(self.addresses)}" + (f" ({why})" if why else ""))

    async def find_leader(self, deadline: Deadline) -> str:
        """The leader master's address, waiting (with backoff) for one to be elected."""
        while True:
            addr = self.leader or await self._find_leader(deadline)
            if addr is not None:
                return addr
            await deadline.backoff(self._no_leader())

    async def _find_leader(self, deadline: Deadline) -> str | None:
        """Ask every master at once; the first that says it leads wins, else the hint most of them give."""
        cap = min(self.rpc_timeout_s, 3.0)
        timeout = deadline.rpc_timeout(cap)

        async def ask(addr: str) -> dict[str, Any] | None:
            try:
                r: dict[str, Any] = await self.rpc.call(addr, "Master", "ConnectToMaster", {}, timeout_s=timeout)
                self._errors.pop(addr, None)
                return r
            except KuduNotAuthorized:
                raise  # the masters refuse this client's credentials: asking again will not change that
            except KuduBadStatus as e:
                # An attempt cut short by the operation's own deadline says nothing new about the master:
                # its timeout must not hide what an earlier attempt learnt (e.g. connection refused).
                if not (isinstance(e, KuduTimedOut) and timeout < cap and addr in self._errors):
                    self._errors[addr] = str(e)
                return None

        answers = await asyncio.gather(*(ask(a) for a in self.addresses))
        hints: list[str] = []
        for addr, ans in zip(list(self.addresses), answers, strict=True):
            if ans is None:
                continue
            if ans.get("leader"):
                self._follow_masters(addr, ans.get("masters"))
                self.leader = addr
                return addr
            if ans.get("leader_address") in self.addresses:
                hints.append(ans["leader_address"])
        return None if not hints else max(set(hints), key=hints.count)


@dataclass
class ReplicaLocation:
    uuid: str
    rpc_address: str
    role: str  # LEADER | FOLLOWER | LEARNER | UNKNOWN

    def to_dict(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "rpc_address": self.rpc_address, "role": self.role}


@dataclass
class TabletLocation:
    """One tablet of a table, and where its replicas are (kudu-python's ``Tablet``)."""

    tablet_id: str
    partition: Partition
    replicas: list[ReplicaLocation]
    leader_address: str | None = None
    failed: set[str] = field(default_factory=set)  # addresses that failed us recently

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> TabletLocation:
        reps = [
            ReplicaLocation(r["uuid"], r["rpc_address"], r.get("role", "UNKNOWN"))
            for r in d.get("replicas", [])
            if r.get("rpc_address")
        ]
        leader = next((r.rpc_address for r in reps if r.role == "LEADER"), None)
        return cls(d["tablet_id"], Partition.from_dict(d["partition"]), reps, leader)

    def to_wire(self) -> dict[str, Any]:
        return {
            "tablet_id": self.tablet_id,
            "partition": self.partition.to_dict(),
            "replicas": [r.to_dict() for r in self.replicas],
        }

    def id(self) -> str:  # kudu-python: Tablet.id()
        return self.tablet_id

    def addresses(self) -> list[str]:
        return [r.rpc_address for r in self.replicas if r.role != "LEARNER"]

    def next_leader_guess(self) -> str | None:
        """The known leader, else a replica that has not failed us yet (they tell who leads)."""
        if self.leader_address and self.leader_address not in self.failed:
            return self.leader_address
        for a in self.addresses():
            if a not in self.failed:
                return a
        return None


class TabletServer(dict[str, Any]):
    """A tablet server as the master lists it (kudu-python's ``TabletServer``): the master's fields by key
    (``uuid``, ``rpc_address``, ``live`` ...), and kudu-python's ``uuid()``, ``hostname()``, ``port()``."""

    def uuid(self) -> str:
        return str(self["uuid"])

    def hostname(self) -> str:
        return str(self["rpc_address"]).rpartition(":")[0].strip("[]")

    def port(self) -> int:
        return int(str(self["rpc_address"]).rpartition(":")[2])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TabletServer):
            return NotImplemented
        return (self.uuid(), self.hostname(), self.port()) == (other.uuid(), other.hostname(), other.port())

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __repr__(self) -> str:
        return f"TabletServer(uuid={self.get('uuid')}, rpc_address={self.get('rpc_address')})"


class Replica:
    """One replica of a tablet (kudu-python's ``Replica``), from ``Tablet.replicas()``."""

    def __init__(self, location: ReplicaLocation) -> None:
        self._loc = location

    def is_leader(self) -> bool:
        return self._loc.role == "LEADER"

    def ts(self) -> TabletServer:
        return TabletServer(uuid=self._loc.uuid, rpc_address=self._loc.rpc_address)

    def __repr__(self) -> str:
        return f"Replica({self._loc.uuid} at {self._loc.rpc_address}, {self._loc.role})"


class Tablet:
    """A tablet as a scan token sees it (kudu-python's ``Tablet``): its id and its replicas."""

    def __init__(self, location: TabletLocation) -> None:
        self._loc = location

    def id(self) -> str:
        return self._loc.tablet_id

    def replicas(self) -> list[Replica]:
        return [Replica(r) for r in self._loc.replicas]

    def __repr__(self) -> str:
        return f"Tablet({self._loc.tablet_id})"


class TableLocations:
    """All tablets of one table, sorted by partition-key start (the master sends them that way)."""

    def __init__(self, table_id: str, tablets: list[TabletLocation]) -> None:
        self.table_id = table_id
        self.tablets = sorted(tablets, key=lambda t: t.partition.partition_key_start)
        self.starts = [t.partition.partition_key_start for t in self.tablets]
        self.fetched_at = time.monotonic()

    def expired(self, now: float) -> bool:
        return now - self.fetched_at > LOCATION_TTL_S

    def find(self, partition_key: bytes) -> TabletLocation | None:
        i = bisect.bisect_right(self.starts, partition_key) - 1
        if i < 0:
            return None
        t = self.tablets[i]
        return t if t.partition.contains(partition_key) else None

    def assign(self, keys: list[bytes] | pa.Array) -> np.ndarray:
        """For each partition key, the index of its tablet, or -1 where no tablet covers it (a range gap).

        Never a Python loop over rows: keys are dictionary-encoded first (in Arrow's C++; a table
        partitioned by hash only has a few distinct keys however many rows a batch holds) and only the
        distinct ones are searched, in Python when they are few; when they are many (a table
        range-partitioned on its key, as by default, has one per row) and the tablets few, each is
        compared with every tablet's start in Arrow instead."""
        arr = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.binary())
        if len(arr) == 0:
            return np.zeros(0, dtype=np.int64)
        enc = pc.dictionary_encode(arr)
        distinct = enc.dictionary
        if len(distinct) > FEW_DISTINCT_KEYS and len(self.starts) <= COMPARE_MAX_TABLETS:
            per_key = self._assign_by_compare(distinct)
        else:
            per_key = self._assign_distinct(distinct.to_pylist())
        out: np.ndarray = per_key[enc.indices.to_numpy(zero_copy_only=False)]
        return out

    def _assign_by_compare(self, arr: pa.Array) -> np.ndarray:
        """Tablet index = (number of starts <= key) - 1 (starts are sorted), then -1 where the key is at
        or past that tablet's end: one vectorised comparison per tablet."""
        arr = arr.cast(pa.binary())
        count = np.zeros(len(arr), dtype=np.int64)
        for start in self.starts:
            if start:
                count += pc.greater_equal(arr, pa.scalar(start, pa.binary())).to_numpy(zero_copy_only=False)
            else:
                count += 1
        idx = count - 1
        valid = idx >= 0
        ends = pa.array([t.partition.partition_key_end for t in self.tablets], pa.binary())
        end = ends.take(pa.array(np.where(valid, idx, 0)))
        inside = pc.or_(pc.equal(pc.binary_length(end), 0), pc.less(arr, end)).to_numpy(zero_copy_only=False)
        idx[~(valid & inside)] = -1
        return idx

    def _assign_distinct(self, keys: list[bytes]) -> np.ndarray:
        starts = np.array(self.starts, dtype=object)
        arr = np.array(keys, dtype=object)
        idx = np.searchsorted(starts, arr, side="right").astype(np.int64) - 1
        ends = np.array([t.partition.partition_key_end for t in self.tablets], dtype=object)
        out = idx.copy()
        valid = idx >= 0
        if valid.any():
            e = ends[idx[valid]]
            k = arr[valid]
            inside = np.array([not end or key < end for key, end in zip(k, e, strict=True)], dtype=bool)
            sub = out[valid]
            sub[~inside] = -1
            out[valid] = sub
        return out

    def by_id(self, tablet_id: str) -> TabletLocation | None:
        return next((t for t in self.tablets if t.tablet_id == tablet_id), None)


class MetaCache:
    """Table locations by table id; one fetch in flight per table."""

    def __init__(self, masters: MasterClient) -> None:
        self.masters = masters
        self._tables: dict[str, TableLocations] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def locations(self, table_id: str, deadline: Deadline, *, refresh: bool = False) -> TableLocations:
        cached = self._tables.get(table_id)
        if cached is not None and not refresh and not cached.expired(time.monotonic()):
            return cached
        lock = self._locks.setdefault(table_id, asyncio.Lock())
        async with lock:
            now_cached = self._tables.get(table_id)
            if now_cached is not None and now_cached is not cached and not now_cached.expired(time.monotonic()):
                return now_cached  # someone refreshed while we waited
            reply = await self.masters.call("GetTableLocations", {"table_id": table_id}, deadline)
            tablets = [TabletLocation.from_wire(t) for t in reply.get("tablets", [])]
            if cached is not None:  # keep learned leaders when the master does not know one yet
                for t in tablets:
                    old = cached.by_id(t.tablet_id)
                    if old is not None and t.leader_address is None and old.leader_address in t.addresses():
                        t.leader_address = old.leader_address
            locs = TableLocations(table_id, tablets)
            self._tables[table_id] = locs
            return locs

    def invalidate(self, table_id: str) -> None:
        self._tables.pop(table_id, None)

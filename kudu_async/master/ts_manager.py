"""The master's in-memory registry of tablet servers and the tablet directory learned from their reports.

Kudu's masters keep tservers in memory, not in the catalog: a tserver registers with every master and
heartbeats each one, so a restarted master rebuilds this state within a heartbeat or two (it answers
``needs_reregister`` to uuids it does not know). Liveness is "heartbeat seen within the unresponsive
timeout" (Kudu's ``--tserver_unresponsive_timeout_ms``).

Sans-IO, like ``consensus/raft.py``: no asyncio, no clock reads. Every method that needs the time takes
``now`` (seconds on a monotonic clock of the caller's choice), so tests drive time by hand.

The wire shapes are those of ``Master/TSHeartbeat`` (``master.messages``): every field is checked before
any state changes, and a bad one raises ``KuduInvalidArgument`` naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.master.messages import Report, TSHeartbeatRequest, TSInfo
from kudu_async.rpc.messages import convert, to_builtins

log = logging.getLogger(__name__)


def parse_ts_info(info: TSInfo | Any) -> TSInfo:
    """A tserver's registration, checked (already checked when it came in a decoded heartbeat)."""
    if isinstance(info, TSInfo):
        return info
    ts = convert(info, TSInfo, "ts")
    ts.check()
    return ts


def parse_report(report: Report | Any) -> Report:
    """A tablet report, checked (already checked when it came in a decoded heartbeat)."""
    if isinstance(report, Report):
        return report
    rep = convert(report, Report, "report")
    rep.check()
    return rep


def parse_heartbeat_request(request: Any) -> TSHeartbeatRequest:
    """Check a whole heartbeat (a decoded map) before the master acts on any part of it."""
    return convert(request, TSHeartbeatRequest)


# --- the registry ------------------------------------------------------------------------------------------


@dataclass
class _TServer:
    uuid: str
    rpc_address: str
    http_address: str
    version: str
    start_time: float
    registered_at: float
    last_heartbeat: float
    needs_full_report: bool = True
    last_seq: int = -1  # seq of the last report applied since this registration
    num_live_tablets: int = 0
    leader_count: int = 0
    quiescing: bool = False  # as its last heartbeat said
    tablets: set[str] = field(default_factory=set)  # tablets this tserver reported a replica of


@dataclass
class _Tablet:
    table_id: str
    replicas: dict[str, dict[str, Any]] = field(default_factory=dict)  # tserver uuid -> its latest report
    config: dict[str, Any] | None = None  # the newest committed config any replica reported
    config_reported_by: str | None = None
    leader_uuid: str | None = None  # leader as of ``term``, from the newest-term report
    term: int = -1


class TSManager:
    """Registered tservers (uuid -> registration, liveness, counts) and the replica directory."""

    def __init__(self, unresponsive_timeout_s: float) -> None:
        if not unresponsive_timeout_s > 0:
            raise KuduInvalidArgument(f"unresponsive_timeout_s must be > 0, got {unresponsive_timeout_s}")
        self.unresponsive_timeout_s = unresponsive_timeout_s
        self._ts: dict[str, _TServer] = {}
        self._tablets: dict[str, _Tablet] = {}

    # --- registration and liveness ------------------------------------------------------------------------

    def register(self, info: TSInfo | Any, now: float, wall_time: float | None = None) -> None:
        """Record a (re)registration; the master then wants a full report before trusting incremental ones.

        ``wall_time`` (unix seconds) is what ``descriptors`` shows as ``registered_at``; it defaults to
        ``now`` for callers that run everything on one clock.
        """
        ts = to_builtins(parse_ts_info(info))
        registered_at = now if wall_time is None else wall_time
        known = self._ts.get(ts["uuid"])
        if known is None:
            self._ts[ts["uuid"]] = _TServer(
                ts["uuid"],
                ts["rpc_address"],
                ts["http_address"],
                ts["version"],
                ts["start_time"],
                registered_at,
                now,
            )
            log.info("tserver registered", extra={"ts_uuid": ts["uuid"], "rpc_address": ts["rpc_address"]})
            return
        if (known.rpc_address, known.http_address) != (ts["rpc_address"], ts["http_address"]):
            log.warning(
                "tserver re-registered at a different address",
                extra={
                    "ts_uuid": known.uuid,
                    "old_rpc_address": known.rpc_address,
                    "new_rpc_address": ts["rpc_address"],
                    "old_http_address": known.http_address,
                    "new_http_address": ts["http_address"],
                },
            )
        else:
            log.info("tserver re-registered", extra={"ts_uuid": known.uuid, "rpc_address": ts["rpc_address"]})
        known.rpc_address = ts["rpc_address"]
        known.http_address = ts["http_address"]
        known.version = ts["version"]
        known.start_time = ts["start_time"]
        known.registered_at = registered_at
        known.last_heartbeat = max(known.last_heartbeat, now)
        known.needs_full_report = True
        known.last_seq = -1  # a restarted tserver numbers its reports from scratch

    def heartbeat(
        self,
        uuid: str,
        now: float,
        num_live_tablets: int | None = None,
        leader_count: int | None = None,
        quiescing: bool | None = None,
    ) -> bool:
        """Note that ``uuid`` is alive; False if it never registered here (it must register first)."""
        ts = self._ts.get(uuid)
        if ts is None:
            return False
        ts.last_heartbeat = max(ts.last_heartbeat, now)
        if num_live_tablets is not None:
            ts.num_live_tablets = num_live_tablets
        if leader_count is not None:
            ts.leader_count = leader_count
        if quiescing is not None:
            ts.quiescing = quiescing
        return True

    def quiescing_tservers(self) -> set[str]:
        """Uuids of the tservers whose last heartbeat said they are quiescing."""
        return {u for u, ts in self._ts.items() if ts.quiescing}

    def registration(self, uuid: str) -> dict[str, Any] | None:
        """What ``uuid`` registered with (uuid, addresses, version, start_time), or None if unknown."""
        ts = self._ts.get(uuid)
        if ts is None:
            return None
        return {
            "uuid": ts.uuid,
            "rpc_address": ts.rpc_address,
            "http_address": ts.http_address,
            "version": ts.version,
            "start_time": ts.start_time,
        }

    def is_live(self, uuid: str, now: float) -> bool:
        ts = self._ts.get(uuid)
        return ts is not None and now - ts.last_heartbeat < self.unresponsive_timeout_s

    def silent_for(self, uuid: str, now: float) -> float | None:
        """Seconds since ``uuid`` was last heard from (its "dead since" clock); None if never registered here.

        Re-replication counts a tserver's replicas as failed once this exceeds
        ``--follower_unavailable_considered_failed_sec``; a heartbeat resets it.
        """
        ts = self._ts.get(uuid)
        return None if ts is None else max(0.0, now - ts.last_heartbeat)

    def live_tservers(self, now: float) -> list[str]:
        """Uuids of the tservers heard from within the timeout, sorted (where new replicas may go)."""
        return sorted(u for u in self._ts if self.is_live(u, now))

    def unregister(self, uuid: str, now: float, force_live: bool = False) -> None:
        """Forget a tserver and its replicas in the directory (Kudu's UnregisterTServer: a decommissioned
        server stops showing as dead). A live one is refused unless ``force_live``: it would register again
        with its next heartbeat."""
        ts = self._ts.get(uuid)
        if ts is None:
            raise KuduNotFound(f"tserver {uuid} is not registered with this master", {"uuid": uuid})
        if self.is_live(uuid, now) and not force_live:
            raise KuduIllegalState(
                f"tserver {uuid} is live (heard from {now - ts.last_heartbeat:.1f} s ago); stop it first or "
                "pass force_unregister_live_tserver",
                {"uuid": uuid},
            )
        for tid in list(ts.tablets):
            self._drop_replica(tid, ts)
        del self._ts[uuid]
        log.info("tserver unregistered", extra={"ts_uuid": uuid, "forced": force_live})

    def needs_full_report(self, uuid: str) -> bool:
        ts = self._ts.get(uuid)
        return True if ts is None else ts.needs_full_report

    def request_full_reports(self) -> None:
        """Ask every tserver for a full report (a newly elected leader master does this, as in Kudu)."""
        for ts in self._ts.values():
            ts.needs_full_report = True

    def request_full_report(self, uuid: str) -> None:
        """Ask one tserver for a full report (its directory entry was found to disagree with it)."""
        ts = self._ts.get(uuid)
        if ts is not None and not ts.needs_full_report:
            log.info("asking a tserver for a full report: the directory disagrees with it", extra={"ts_uuid": uuid})
            ts.needs_full_report = True

    def descriptors(self, now: float) -> list[dict[str, Any]]:
        """Every registered tserver, live or dead, sorted by uuid (``/api/v1/tservers``)."""
        return [self._describe(self._ts[u], now) for u in sorted(self._ts)]

    def _describe(self, ts: _TServer, now: float) -> dict[str, Any]:
        return {
            "uuid": ts.uuid,
            "rpc_address": ts.rpc_address,
            "http_address": ts.http_address,
            "version": ts.version,
            "start_time": ts.start_time,
            "registered_at": ts.registered_at,
            "last_heartbeat_age_s": round(max(0.0, now - ts.last_heartbeat), 3),
            "live": now - ts.last_heartbeat < self.unresponsive_timeout_s,
            # As the tserver counts them in its heartbeats (every master knows them, not only the leader).
            "num_replicas": ts.num_live_tablets,
            "num_leaders": ts.leader_count,
            "quiescing": ts.quiescing,
            # Replicas in this master's directory (only the leader processes reports).
            "num_reported_replicas": len(ts.tablets),
            "awaiting_full_report": ts.needs_full_report,
            "last_report_seq": ts.last_seq,
        }

    # --- tablet reports -----------------------------------------------------------------------------------

    def process_report(self, uuid: str, report: Report | Any, now: float) -> bool:
        """Apply a tablet report from a registered tserver; False if it was ignored.

        Ignored: an incremental report while a full one is awaited (the caller answers
        ``needs_full_report``), and a report whose ``seq`` is not newer than the last one applied since
        registration (a late duplicate must not roll replica state back).
        """
        ts = self._ts.get(uuid)
        if ts is None:
            raise KuduIllegalState(f"tserver {uuid} sent a tablet report without registering")
        rep = parse_report(report)
        if rep.seq <= ts.last_seq:
            log.info("ignoring stale tablet report", extra={"ts_uuid": uuid, "seq": rep.seq, "last_seq": ts.last_seq})
            return False
        if not rep.full and ts.needs_full_report:
            log.info("ignoring incremental tablet report: waiting for a full one", extra={"ts_uuid": uuid})
            return False
        if rep.full:
            listed = {t.tablet_id for t in rep.tablets}
            for tablet_id in ts.tablets - listed:  # a full report's unlisted tablets count as removed
                self._drop_replica(tablet_id, ts)
        for r in rep.tablets:
            self._apply_replica(to_builtins(r), ts)
        for tablet_id in rep.removed:
            self._drop_replica(tablet_id, ts)
        ts.last_seq = rep.seq
        ts.last_heartbeat = max(ts.last_heartbeat, now)
        if rep.full:
            ts.needs_full_report = False
        return True

    def _apply_replica(self, r: dict[str, Any], ts: _TServer) -> None:
        tablet_id = r["tablet_id"]
        t = self._tablets.get(tablet_id)
        if t is None:
            t = self._tablets[tablet_id] = _Tablet(r["table_id"])
        elif t.table_id != r["table_id"]:
            log.warning(
                "replicas disagree on a tablet's table",
                extra={
                    "tablet_id": tablet_id,
                    "ts_uuid": ts.uuid,
                    "known_table_id": t.table_id,
                    "reported_table_id": r["table_id"],
                },
            )
        t.replicas[ts.uuid] = r
        ts.tablets.add(tablet_id)
        config = r["config"]
        if t.config is None or config["opid_index"] >= t.config["opid_index"]:
            t.config = config
            t.config_reported_by = ts.uuid
        if r["term"] > t.term or (r["term"] == t.term and t.leader_uuid is None):
            t.term = r["term"]
            t.leader_uuid = r["leader_uuid"]

    def _drop_replica(self, tablet_id: str, ts: _TServer) -> None:
        ts.tablets.discard(tablet_id)
        t = self._tablets.get(tablet_id)
        if t is None:
            return
        t.replicas.pop(ts.uuid, None)
        if not t.replicas:  # nobody hosts it any more; the catalog, not this directory, remembers tablets
            del self._tablets[tablet_id]

    # --- the directory ------------------------------------------------------------------------------------

    def tablets(self) -> list[str]:
        """Ids of the tablets at least one registered tserver reports a replica of, sorted."""
        return sorted(self._tablets)

    def tablets_on(self, uuid: str) -> set[str]:
        """Ids of the tablets ``uuid`` reports a replica of (empty if unknown)."""
        ts = self._ts.get(uuid)
        return set() if ts is None else set(ts.tablets)

    def tablet_replicas(self, tablet_id: str) -> dict[str, dict[str, Any]]:
        """tserver uuid -> that replica's latest report (empty if no tserver reports the tablet)."""
        t = self._tablets.get(tablet_id)
        return {} if t is None else {u: dict(r) for u, r in t.replicas.items()}

    def leader_of(self, tablet_id: str) -> str | None:
        """The tablet's leader as of the newest term reported (None if unknown)."""
        t = self._tablets.get(tablet_id)
        return None if t is None else t.leader_uuid

    def tablet_info(self, tablet_id: str) -> dict[str, Any] | None:
        """The directory's view of one tablet: newest config, leader as of the newest term, replicas."""
        t = self._tablets.get(tablet_id)
        if t is None:
            return None
        return {
            "tablet_id": tablet_id,
            "table_id": t.table_id,
            "config": None if t.config is None else dict(t.config),
            "config_reported_by": t.config_reported_by,
            "leader_uuid": t.leader_uuid,
            "term": t.term,
            "replicas": self.tablet_replicas(tablet_id),
        }

"""The master's in-memory registry of tablet servers and the tablet directory learned from their reports.

Kudu's masters keep tservers in memory, not in the catalog: a tserver registers with every master and
heartbeats each one, so a restarted master rebuilds this state within a heartbeat or two (it answers
``needs_reregister`` to uuids it does not know). Liveness is "heartbeat seen within the unresponsive
timeout" (Kudu's ``--tserver_unresponsive_timeout_ms``).

Sans-IO, like ``consensus/raft.py``: no asyncio, no clock reads. Every method that needs the time takes
``now`` (seconds on a monotonic clock of the caller's choice), so tests drive time by hand.

The wire shapes validated here are those of ``Master/TSHeartbeat`` (see ``parse_heartbeat_request``);
every field is checked before any state changes, and a bad one raises ``KuduInvalidArgument`` naming it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument
from kudu_async.server.config import parse_hostport

log = logging.getLogger(__name__)

MAX_ID_CHARS = 256  # uuids and tablet ids are 32 hex chars; anything this long is garbage, not an id
MAX_TEXT_CHARS = 4096  # error messages, versions, states


# --- validation ---------------------------------------------------------------------------------------------


def _bad(path: str, problem: str) -> KuduInvalidArgument:
    return KuduInvalidArgument(f"{path}: {problem}", {"field": path})


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _get(d: dict[str, Any], key: str, path: str) -> Any:
    if key not in d:
        raise _bad(f"{path}.{key}" if path else key, "missing")
    return d[key]


def _map(v: Any, path: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _bad(path, f"expected a map, got {_type_name(v)}")
    return v


def _id(v: Any, path: str) -> str:
    if not isinstance(v, str) or not v:
        raise _bad(path, f"expected a non-empty string, got {_type_name(v) if not isinstance(v, str) else 'empty'}")
    if len(v) > MAX_ID_CHARS or not v.isprintable():
        raise _bad(path, f"not a plausible id ({len(v)} characters)")
    return v


def _opt_id(v: Any, path: str) -> str | None:
    return None if v is None else _id(v, path)


def _text(v: Any, path: str, *, allow_none: bool = False) -> str | None:
    if v is None and allow_none:
        return None
    if not isinstance(v, str):
        raise _bad(path, f"expected a string{' or null' if allow_none else ''}, got {_type_name(v)}")
    if len(v) > MAX_TEXT_CHARS:
        raise _bad(path, f"longer than {MAX_TEXT_CHARS} characters")
    return v


def _int(v: Any, path: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(path, f"expected an integer, got {_type_name(v)}")
    if v < minimum:
        raise _bad(path, f"must be >= {minimum}, got {v}")
    return v


def _bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise _bad(path, f"expected true or false, got {_type_name(v)}")
    return v


def _hostport(v: Any, path: str) -> str:
    if not isinstance(v, str):
        raise _bad(path, f"expected 'host:port', got {_type_name(v)}")
    try:
        parse_hostport(v)
    except ValueError as e:
        raise _bad(path, str(e)) from None
    return v


def _id_list(v: Any, path: str) -> list[str]:
    if not isinstance(v, list):
        raise _bad(path, f"expected a list, got {_type_name(v)}")
    out = [_id(x, f"{path}[{i}]") for i, x in enumerate(v)]
    if len(set(out)) != len(out):
        raise _bad(path, "duplicate entries")
    return out


def validate_ts_info(info: Any, path: str = "ts") -> dict[str, Any]:
    """A tserver's registration (``ts`` of a heartbeat), checked and copied."""
    d = _map(info, path)
    start_time = _get(d, "start_time", path)
    if (
        isinstance(start_time, bool)
        or not isinstance(start_time, int | float)
        or not math.isfinite(start_time)
        or start_time < 0
    ):
        raise _bad(f"{path}.start_time", f"expected a non-negative unix time, got {start_time!r:.50}")
    return {
        "uuid": _id(_get(d, "uuid", path), f"{path}.uuid"),
        "rpc_address": _hostport(_get(d, "rpc_address", path), f"{path}.rpc_address"),
        "http_address": _hostport(_get(d, "http_address", path), f"{path}.http_address"),
        "version": _text(_get(d, "version", path), f"{path}.version"),
        "start_time": float(start_time),
    }


def validate_raft_config(config: Any, path: str) -> dict[str, Any]:
    """The committed Raft config in a tablet report; every voter and non-voter needs an address."""
    d = _map(config, path)
    voters = _id_list(_get(d, "voters", path), f"{path}.voters")
    non_voters = _id_list(_get(d, "non_voters", path), f"{path}.non_voters")
    both = set(voters) & set(non_voters)
    if both:
        raise _bad(path, f"{sorted(both)} listed as voter and non-voter")
    peers_raw = _map(_get(d, "peers", path), f"{path}.peers")
    peers = {_id(k, f"{path}.peers key"): _hostport(v, f"{path}.peers[{k}]") for k, v in peers_raw.items()}
    missing = [u for u in (*voters, *non_voters) if u not in peers]
    if missing:
        raise _bad(f"{path}.peers", f"no address for member(s) {missing}")
    return {
        # -1: no config change committed yet (Kudu's kInvalidOpIdIndex for a tablet's first config).
        "opid_index": _int(_get(d, "opid_index", path), f"{path}.opid_index", -1),
        "voters": voters,
        "non_voters": non_voters,
        "peers": peers,
    }


def validate_tablet_report(r: Any, path: str) -> dict[str, Any]:
    """One replica's state as its tserver reports it, checked and copied."""
    d = _map(r, path)
    return {
        "tablet_id": _id(_get(d, "tablet_id", path), f"{path}.tablet_id"),
        "table_id": _text(_get(d, "table_id", path), f"{path}.table_id"),
        "state": _text(_get(d, "state", path), f"{path}.state"),
        "error": _text(_get(d, "error", path), f"{path}.error", allow_none=True),
        "role": _text(_get(d, "role", path), f"{path}.role", allow_none=True),
        "term": _int(_get(d, "term", path), f"{path}.term", 0),
        "leader_uuid": _opt_id(_get(d, "leader_uuid", path), f"{path}.leader_uuid"),
        "config": validate_raft_config(_get(d, "config", path), f"{path}.config"),
        "schema_version": _int(_get(d, "schema_version", path), f"{path}.schema_version", 0),
    }


def validate_report(report: Any, path: str = "report") -> dict[str, Any]:
    """A full or incremental tablet report, checked and copied; a tablet may appear only once."""
    d = _map(report, path)
    tablets_raw = _get(d, "tablets", path)
    if not isinstance(tablets_raw, list):
        raise _bad(f"{path}.tablets", f"expected a list, got {_type_name(tablets_raw)}")
    tablets = [validate_tablet_report(t, f"{path}.tablets[{i}]") for i, t in enumerate(tablets_raw)]
    ids = [t["tablet_id"] for t in tablets]
    if len(set(ids)) != len(ids):
        raise _bad(f"{path}.tablets", "a tablet is reported more than once")
    removed = _id_list(_get(d, "removed", path), f"{path}.removed")
    both = set(ids) & set(removed)
    if both:
        raise _bad(f"{path}.removed", f"{sorted(both)[:5]} also reported as present")
    return {
        "full": _bool(_get(d, "full", path), f"{path}.full"),
        "seq": _int(_get(d, "seq", path), f"{path}.seq", 0),
        "tablets": tablets,
        "removed": removed,
    }


@dataclass(frozen=True)
class HeartbeatRequest:
    """A validated ``Master/TSHeartbeat`` request."""

    ts: dict[str, Any]
    register: bool
    report: dict[str, Any] | None
    num_live_tablets: int
    leader_count: int

    @property
    def uuid(self) -> str:
        uuid: str = self.ts["uuid"]
        return uuid


def parse_heartbeat_request(request: Any) -> HeartbeatRequest:
    """Check a whole heartbeat before the master acts on any part of it."""
    d = _map(request, "request")
    report = _get(d, "report", "")
    return HeartbeatRequest(
        ts=validate_ts_info(_get(d, "ts", "")),
        register=_bool(_get(d, "register", ""), "register"),
        report=None if report is None else validate_report(report),
        num_live_tablets=_int(_get(d, "num_live_tablets", ""), "num_live_tablets", 0),
        leader_count=_int(_get(d, "leader_count", ""), "leader_count", 0),
    )


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

    def register(self, info: Any, now: float, wall_time: float | None = None) -> None:
        """Record a (re)registration; the master then wants a full report before trusting incremental ones.

        ``wall_time`` (unix seconds) is what ``descriptors`` shows as ``registered_at``; it defaults to
        ``now`` for callers that run everything on one clock.
        """
        ts = validate_ts_info(info)
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
        self, uuid: str, now: float, num_live_tablets: int | None = None, leader_count: int | None = None
    ) -> bool:
        """Note that ``uuid`` is alive; False if it never registered here (it must register first)."""
        ts = self._ts.get(uuid)
        if ts is None:
            return False
        ts.last_heartbeat = max(ts.last_heartbeat, now)
        if num_live_tablets is not None:
            ts.num_live_tablets = _int(num_live_tablets, "num_live_tablets", 0)
        if leader_count is not None:
            ts.leader_count = _int(leader_count, "leader_count", 0)
        return True

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

    def descriptor(self, uuid: str, now: float) -> dict[str, Any] | None:
        ts = self._ts.get(uuid)
        return None if ts is None else self._describe(ts, now)

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
            # Replicas in this master's directory (only the leader processes reports).
            "num_reported_replicas": len(ts.tablets),
            "awaiting_full_report": ts.needs_full_report,
            "last_report_seq": ts.last_seq,
        }

    # --- tablet reports -----------------------------------------------------------------------------------

    def process_report(self, uuid: str, report: Any, now: float) -> bool:
        """Apply a tablet report from a registered tserver; False if it was ignored.

        Ignored: an incremental report while a full one is awaited (the caller answers
        ``needs_full_report``), and a report whose ``seq`` is not newer than the last one applied since
        registration (a late duplicate must not roll replica state back).
        """
        ts = self._ts.get(uuid)
        if ts is None:
            raise KuduIllegalState(f"tserver {uuid} sent a tablet report without registering")
        rep = validate_report(report)
        if rep["seq"] <= ts.last_seq:
            log.info(
                "ignoring stale tablet report", extra={"ts_uuid": uuid, "seq": rep["seq"], "last_seq": ts.last_seq}
            )
            return False
        if not rep["full"] and ts.needs_full_report:
            log.info("ignoring incremental tablet report: waiting for a full one", extra={"ts_uuid": uuid})
            return False
        if rep["full"]:
            listed = {t["tablet_id"] for t in rep["tablets"]}
            for tablet_id in ts.tablets - listed:  # a full report's unlisted tablets count as removed
                self._drop_replica(tablet_id, ts)
        for r in rep["tablets"]:
            self._apply_replica(r, ts)
        for tablet_id in rep["removed"]:
            self._drop_replica(tablet_id, ts)
        ts.last_seq = rep["seq"]
        ts.last_heartbeat = max(ts.last_heartbeat, now)
        if rep["full"]:
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

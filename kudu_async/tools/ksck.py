"""``kudu cluster ksck``: is the cluster healthy, and if not, what exactly is wrong.

Two halves, as in the rest of the code base: :func:`collect` asks the cluster (the leader master's
catalog, every master's and tserver's status, every live tserver's tablet reports, optionally a checksum
of every replica at one snapshot) and returns plain data; :func:`evaluate` turns that data into a
report with no I/O, so every verdict can be unit-tested on hand-made snapshots.

Tablet verdicts follow Kudu's ksck (``tools/ksck.cc``), worst first:

- UNAVAILABLE: no replica leads, or fewer than a majority of the voters are RUNNING;
- CONSENSUS_MISMATCH: replicas (or the master) disagree on the voters of the config or on the leader;
- UNDER_REPLICATED: a leader and a majority, but fewer healthy voters than the replication factor;
- RECOVERING: enough healthy voters, but some replica is still bootstrapping or being copied;
- HEALTHY.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kudu_async.client.aio import AsyncClient
from kudu_async.common.errors import KuduBadStatus
from kudu_async.common.retry import Deadline

HEALTHY = "HEALTHY"
RECOVERING = "RECOVERING"
UNDER_REPLICATED = "UNDER_REPLICATED"
CONSENSUS_MISMATCH = "CONSENSUS_MISMATCH"
UNAVAILABLE = "UNAVAILABLE"
_SEVERITY = [HEALTHY, RECOVERING, UNDER_REPLICATED, CONSENSUS_MISMATCH, UNAVAILABLE]
MAX_CONCURRENT_CALLS = 16  # per ksck run: RPCs to servers in flight at once


@dataclass
class Snapshot:
    """Everything ksck learned from the cluster (plain data: tests build these by hand)."""

    masters: dict[str, dict[str, Any]]  # master address -> its GetStatus, or {"error": ...}
    tservers: list[dict[str, Any]]  # the leader master's ListTabletServers
    tserver_status: dict[str, dict[str, Any]]  # tserver uuid -> its GetStatus, or {"error": ...}
    # tserver uuid -> {tablet_id -> that tserver's report of its replica}; missing uuid = not asked/down
    reports: dict[str, dict[str, dict[str, Any]]]
    tables: list[dict[str, Any]]  # {"name", "table_id", "num_replicas", "tablets": master locations}
    checksums: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # tablet -> uuid -> result


def evaluate(s: Snapshot) -> dict[str, Any]:
    """The ksck report of a snapshot: ``ok`` plus findings per master, tserver, table and tablet."""
    errors: list[str] = []
    masters = _check_masters(s, errors)
    tservers = _check_tservers(s, errors)
    tables = []
    totals: Counter[str] = Counter()
    for t in s.tables:
        verdicts: Counter[str] = Counter()
        bad_tablets = []
        for loc in t["tablets"]:
            v = tablet_verdict(loc, t["num_replicas"], s)
            verdicts[v["status"]] += 1
            if v["status"] != HEALTHY:
                bad_tablets.append(v)
                errors.append(f"table {t['name']} tablet {loc['tablet_id']}: {v['status']}: {'; '.join(v['why'])}")
        totals.update(verdicts)
        worst = max(verdicts, key=_SEVERITY.index) if verdicts else HEALTHY
        entry: dict[str, Any] = {
            "name": t["name"],
            "table_id": t["table_id"],
            "num_replicas": t["num_replicas"],
            "status": worst,
            "tablets": len(t["tablets"]),
            "tablet_status": dict(sorted(verdicts.items())),
            "unhealthy_tablets": bad_tablets,
        }
        if s.checksums:
            entry["checksum"] = _check_checksums(t, s, errors)
        tables.append(entry)
    versions = Counter(str(m.get("version")) for m in s.masters.values() if "error" not in m)
    versions.update(str(st.get("version")) for st in s.tserver_status.values() if "error" not in st)
    return {
        "ok": not errors,
        "errors": errors,
        "masters": masters,
        "tservers": tservers,
        "versions": dict(versions),
        "tables": tables,
        "tablet_summary": dict(sorted(totals.items())),
    }


def _check_masters(s: Snapshot, errors: list[str]) -> list[dict[str, Any]]:
    out = []
    leaders: set[Any] = set()
    for addr, st in sorted(s.masters.items()):
        if "error" in st:
            errors.append(f"master {addr} is unavailable: {st['error']}")
            out.append({"address": addr, "status": "UNAVAILABLE", "error": st["error"]})
            continue
        leaders.add(st.get("leader_uuid"))
        out.append(
            {
                "address": addr,
                "uuid": st.get("uuid"),
                "status": "HEALTHY",
                "role": "LEADER" if st.get("is_leader") else "FOLLOWER",
                "leader_uuid": st.get("leader_uuid"),
                "term": st.get("term"),
            }
        )
    if None in leaders:
        errors.append("a master knows no leader")
    if len(leaders - {None}) > 1:
        errors.append(f"masters disagree on the leader: {sorted(str(x) for x in leaders - {None})}")
    if out and not any(m.get("role") == "LEADER" for m in out):
        errors.append("no master is the leader")
    return out


def _check_tservers(s: Snapshot, errors: list[str]) -> list[dict[str, Any]]:
    out = []
    for d in s.tservers:
        st = s.tserver_status.get(d["uuid"], {"error": "not asked: the master counts it dead"})
        if "error" in st:
            status = "UNAVAILABLE"
            errors.append(f"tserver {d['uuid']} ({d['rpc_address']}) is unavailable: {st['error']}")
        elif st.get("uuid") != d["uuid"]:
            status = "WRONG_SERVER_UUID"
            errors.append(f"tserver at {d['rpc_address']} has uuid {st.get('uuid')}, the master expects {d['uuid']}")
        else:
            status = "HEALTHY"
        out.append(
            {
                "uuid": d["uuid"],
                "address": d["rpc_address"],
                "status": status,
                "live": d.get("live"),
                "replicas": d.get("num_replicas"),
                "leaders": d.get("num_leaders"),
                **({"error": st["error"]} if "error" in st else {}),
            }
        )
    return out


def tablet_verdict(loc: dict[str, Any], num_replicas: int, s: Snapshot) -> dict[str, Any]:
    """One tablet: its status and why, from the master's locations and the replicas' own reports."""
    tid = loc["tablet_id"]
    why: list[str] = []
    replicas = []
    for r in loc["replicas"]:
        u = r["uuid"]
        rep = s.reports.get(u, {}).get(tid) if u in s.reports else None
        if u not in s.reports:
            state = "TS_UNAVAILABLE"
        elif rep is None:
            state = "MISSING"
        else:
            state = str(rep.get("state"))
        replicas.append(
            {
                "uuid": u,
                "address": r.get("rpc_address"),
                "master_role": r.get("role"),
                "state": state,
                "role": rep.get("role") if rep else None,
                "term": rep.get("term") if rep else None,
                "voters": sorted(rep["config"]["voters"]) if rep and rep.get("config") else None,
            }
        )
    voters = [r for r in replicas if r["master_role"] in ("LEADER", "FOLLOWER")]
    running_voters = [r for r in voters if r["state"] == "RUNNING"]
    leaders = [r for r in replicas if r["role"] == "LEADER" and r["state"] == "RUNNING"]
    top_term = max((r["term"] or 0 for r in leaders), default=0)
    leader = next((r for r in leaders if r["term"] == top_term), None)
    for r in replicas:
        if r["state"] != "RUNNING":
            why.append(f"replica on {r['uuid']} is {r['state']}")
    status = HEALTHY
    if leader is None or 2 * len(running_voters) <= len(voters):
        status = UNAVAILABLE
        if leader is None:
            why.append("no replica is the leader")
        if 2 * len(running_voters) <= len(voters):
            why.append(f"only {len(running_voters)} of {len(voters)} voters are running")
    else:
        master_voters = sorted(r["uuid"] for r in voters)
        views = {tuple(r["voters"]) for r in replicas if r["voters"] is not None and r["state"] == "RUNNING"}
        mismatch = [v for v in views if list(v) != master_voters]
        if mismatch:
            status = CONSENSUS_MISMATCH
            why.append(f"the master sees voters {master_voters}; replicas report {sorted(list(v) for v in views)}")
        elif len(running_voters) < num_replicas:
            status = UNDER_REPLICATED
            why.append(f"{len(running_voters)} running voters for replication factor {num_replicas}")
        elif any(r["state"] != "RUNNING" for r in replicas):
            status = RECOVERING
    return {
        "tablet_id": tid,
        "status": status,
        "why": why,
        "leader": leader["uuid"] if leader else None,
        "replicas": replicas,
    }


def _check_checksums(t: dict[str, Any], s: Snapshot, errors: list[str]) -> dict[str, Any]:
    rows = 0
    mismatched = 0
    for loc in t["tablets"]:
        results = s.checksums.get(loc["tablet_id"], {})
        ok = {u: r for u, r in results.items() if "error" not in r}
        for u, r in results.items():
            if "error" in r:
                errors.append(
                    f"table {t['name']} tablet {loc['tablet_id']}: checksum of the replica on {u} failed: {r['error']}"
                )
        distinct = {(r["rows"], r["checksum"]) for r in ok.values()}
        if len(distinct) > 1:
            mismatched += 1
            errors.append(
                f"table {t['name']} tablet {loc['tablet_id']}: replicas differ at snapshot "
                f"{next(iter(ok.values()))['snapshot_ts']}: "
                + ", ".join(f"{u}: {r['rows']} rows, checksum {r['checksum']}" for u, r in sorted(ok.items()))
            )
        if ok:
            rows += max(r["rows"] for r in ok.values())
    return {"rows": rows, "mismatched_tablets": mismatched}


# --- collection (the I/O half) -----------------------------------------------------------------------


async def collect(
    client: AsyncClient,
    tables: list[str] | None = None,
    checksum: bool = False,
    timeout_s: float = 30.0,
    tablets: list[str] | None = None,
) -> Snapshot:
    """Ask the cluster for a :class:`Snapshot` (of ``tables`` and, within them, ``tablets``; None: all). A
    server that does not answer is recorded, not fatal."""
    sem = asyncio.Semaphore(MAX_CONCURRENT_CALLS)

    async def call(addr: str, service: str, method: str, req: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            try:
                reply: dict[str, Any] = await client.rpc.call(
                    addr, service, method, req, timeout_s=min(timeout_s, 10.0)
                )
                return reply
            except KuduBadStatus as e:
                return {"error": str(e)}

    master_addrs = client.master_addrs
    statuses = await asyncio.gather(*(call(a, "Generic", "GetStatus", {}) for a in master_addrs))
    masters = dict(zip(master_addrs, statuses, strict=True))
    ts_list = await client.list_tablet_servers()
    live = [d for d in ts_list if d.get("live")]
    ts_status = dict(
        zip(
            [d["uuid"] for d in live],
            await asyncio.gather(*(call(d["rpc_address"], "Generic", "GetStatus", {}) for d in live)),
            strict=True,
        )
    )
    listed = await asyncio.gather(*(call(d["rpc_address"], "TabletServer", "ListTablets", {}) for d in live))
    reports: dict[str, dict[str, dict[str, Any]]] = {}
    for d, reply in zip(live, listed, strict=True):
        if "error" not in reply:
            reports[d["uuid"]] = {r["tablet_id"]: r for r in reply.get("tablets", [])}
    names = tables if tables else await client.list_tables()
    infos = []
    for name in names:
        deadline = Deadline(timeout_s, f"locations of table {name}")
        schema = await client.masters.call("GetTableSchema", {"name": name}, deadline)
        locs = await client.masters.call(
            "GetTableLocations", {"table_id": schema["table_id"], "max_returned": 100_000}, deadline
        )
        in_scope = [t for t in locs["tablets"] if tablets is None or t["tablet_id"] in tablets]
        if tablets is not None and not in_scope:
            continue
        infos.append(
            {"name": name, "table_id": schema["table_id"], "num_replicas": schema["num_replicas"], "tablets": in_scope}
        )
    snap = Snapshot(masters, ts_list, ts_status, reports, infos)
    if checksum:
        snap.checksums = await _checksums(snap, call)
    return snap


async def _checksums(s: Snapshot, call: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """Every replica of every tablet at one snapshot per tablet (its leader's choice)."""
    addr = {d["uuid"]: d["rpc_address"] for d in s.tservers}

    async def one(loc: dict[str, Any]) -> tuple[str, dict[str, dict[str, Any]]]:
        tid = loc["tablet_id"]
        v = tablet_verdict(loc, 0, s)
        out: dict[str, dict[str, Any]] = {}
        if v["leader"] is None:
            return tid, {"-": {"error": "no leader to choose the snapshot"}}
        first = await call(addr[v["leader"]], "TabletServer", "Checksum", {"tablet_id": tid})
        out[v["leader"]] = first
        if "error" in first:
            return tid, out
        others = [r["uuid"] for r in loc["replicas"] if r["uuid"] != v["leader"] and r["uuid"] in addr]
        replies = await asyncio.gather(
            *(
                call(addr[u], "TabletServer", "Checksum", {"tablet_id": tid, "snapshot_ts": first["snapshot_ts"]})
                for u in others
            )
        )
        out.update(zip(others, replies, strict=True))
        return tid, out

    pairs = await asyncio.gather(*(one(loc) for t in s.tables for loc in t["tablets"]))
    return dict(pairs)


def render(report: dict[str, Any]) -> str:
    """The plain-text report: problems first, then the summaries."""
    lines = []
    if report["errors"]:
        lines.append(f"{len(report['errors'])} problem(s) found:")
        lines += [f"  - {e}" for e in report["errors"]]
        lines.append("")
    lines.append("Masters:")
    for m in report["masters"]:
        lines.append(f"  {m['address']:<22} {m.get('uuid') or '-':<34} {m['status']:<12} {m.get('role', '')}")
    lines.append("Tablet servers:")
    for t in report["tservers"]:
        lines.append(
            f"  {t['address']:<22} {t['uuid']:<34} {t['status']:<12} replicas={t.get('replicas')} "
            f"leaders={t.get('leaders')}"
        )
    lines.append("Versions: " + ", ".join(f"{v} ({n} servers)" for v, n in sorted(report["versions"].items())))
    lines.append("Tables:")
    for t in report["tables"]:
        extra = ""
        if "checksum" in t:
            extra = f"  checksum: {t['checksum']['rows']} rows, {t['checksum']['mismatched_tablets']} mismatched"
        counts = ", ".join(f"{k}={v}" for k, v in t["tablet_status"].items())
        lines.append(
            f"  {t['name']:<30} {t['status']:<18} {t['tablets']} tablets ({counts}) RF={t['num_replicas']}" + extra
        )
    lines.append("Tablets in total: " + (", ".join(f"{k}={v}" for k, v in report["tablet_summary"].items()) or "none"))
    lines.append("OK" if report["ok"] else "ksck found problems (exit status 1)")
    return "\n".join(lines)

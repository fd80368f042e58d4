"""ksck's verdicts on hand-made cluster snapshots (no cluster needed): every tablet status, master and
tserver problems, checksum mismatches, and the text report."""

from __future__ import annotations

from typing import Any

from kudu_async.tools import ksck
from tests.unit.tools.ksck_layouts import ADDR, A, B, C, D
from tests.unit.tools.ksck_layouts import location as _loc


def _rep(tid: str, role: str, voters: list[str], state: str = "RUNNING", term: int = 3) -> dict[str, Any]:
    return {
        "tablet_id": tid,
        "state": state,
        "role": role,
        "term": term,
        "config": {"opid_index": 5, "voters": voters, "non_voters": []},
    }


def _snap(
    reports: dict[str, dict[str, dict[str, Any]]],
    tablets: list[dict[str, Any]],
    masters: dict[str, dict[str, Any]] | None = None,
) -> ksck.Snapshot:
    ts = [{"uuid": u, "rpc_address": ADDR[u], "live": u in reports} for u in (A, B, C, D)]
    status = {u: {"uuid": u, "version": "0.1.0"} for u in reports}
    status.update({u: {"error": "NETWORK_ERROR: refused"} for u in (A, B, C, D) if u not in reports})
    m = masters or {"127.0.0.1:7051": {"uuid": "m1", "is_leader": True, "leader_uuid": "m1", "version": "0.1.0"}}
    return ksck.Snapshot(
        m, ts, status, reports, [{"name": "t", "table_id": "tid", "num_replicas": 3, "tablets": tablets}]
    )


def _healthy_reports(tid: str = "t1") -> dict[str, dict[str, dict[str, Any]]]:
    v = [A, B, C]
    return {
        A: {tid: _rep(tid, "LEADER", v)},
        B: {tid: _rep(tid, "FOLLOWER", v)},
        C: {tid: _rep(tid, "FOLLOWER", v)},
        D: {},
    }


def test_healthy_cluster() -> None:
    r = ksck.evaluate(_snap(_healthy_reports(), [_loc("t1", A, [A, B, C])]))
    assert r["ok"] and r["errors"] == [] and r["tablet_summary"] == {"HEALTHY": 1}
    assert r["tables"][0]["status"] == "HEALTHY"
    assert ksck.render(r).endswith("OK")


def test_dead_server_makes_under_replicated() -> None:
    reps = _healthy_reports()
    del reps[C]
    r = ksck.evaluate(_snap(reps, [_loc("t1", A, [A, B, C])]))
    assert not r["ok"]
    tab = r["tables"][0]["unhealthy_tablets"][0]
    assert tab["status"] == "UNDER_REPLICATED" and any("TS_UNAVAILABLE" in w for w in tab["why"])
    assert any(C in e and "unavailable" in e for e in r["errors"])
    assert "ksck found problems" in ksck.render(r)


def test_no_majority_or_no_leader_is_unavailable() -> None:
    reps = _healthy_reports()
    del reps[B], reps[C]
    r = ksck.evaluate(_snap(reps, [_loc("t1", A, [A, B, C])]))
    assert r["tables"][0]["unhealthy_tablets"][0]["status"] == "UNAVAILABLE"
    reps = _healthy_reports()
    reps[A]["t1"] = _rep("t1", "FOLLOWER", [A, B, C])
    v = ksck.tablet_verdict(_loc("t1", A, [A, B, C]), 3, _snap(reps, []))
    assert v["status"] == "UNAVAILABLE" and "no replica is the leader" in v["why"]


def test_config_disagreement_is_consensus_mismatch() -> None:
    reps = _healthy_reports()
    reps[B]["t1"] = _rep("t1", "FOLLOWER", [A, B, D])
    v = ksck.tablet_verdict(_loc("t1", A, [A, B, C]), 3, _snap(reps, []))
    assert v["status"] == "CONSENSUS_MISMATCH"


def test_bootstrapping_replica_is_recovering_and_missing_one_is_named() -> None:
    reps = _healthy_reports()
    reps[D]["t1"] = _rep("t1", None, [A, B, C], state="BOOTSTRAPPING")  # type: ignore[arg-type]
    v = ksck.tablet_verdict(_loc("t1", A, [A, B, C], learners=(D,)), 3, _snap(reps, []))
    assert v["status"] == "RECOVERING"
    reps = _healthy_reports()
    del reps[C]["t1"]
    v = ksck.tablet_verdict(_loc("t1", A, [A, B, C]), 3, _snap(reps, []))
    assert v["status"] == "UNDER_REPLICATED" and f"replica on {C} is MISSING" in v["why"]


def test_stale_leader_loses_to_the_higher_term() -> None:
    reps = _healthy_reports()
    reps[B]["t1"] = _rep("t1", "LEADER", [A, B, C], term=4)
    v = ksck.tablet_verdict(_loc("t1", B, [A, B, C]), 3, _snap(reps, []))
    assert v["leader"] == B


def test_master_problems() -> None:
    masters: dict[str, dict[str, Any]] = {
        "m:1": {"uuid": "m1", "is_leader": True, "leader_uuid": "m1"},
        "m:2": {"uuid": "m2", "is_leader": False, "leader_uuid": "m3"},
        "m:3": {"error": "TIMED_OUT"},
    }
    r = ksck.evaluate(_snap(_healthy_reports(), [_loc("t1", A, [A, B, C])], masters))
    assert any("disagree on the leader" in e for e in r["errors"])
    assert any("m:3 is unavailable" in e for e in r["errors"])


def test_checksum_mismatch_is_reported() -> None:
    s = _snap(_healthy_reports(), [_loc("t1", A, [A, B, C])])
    s.checksums = {
        "t1": {
            A: {"rows": 10, "checksum": 1, "snapshot_ts": 7},
            B: {"rows": 10, "checksum": 1, "snapshot_ts": 7},
            C: {"rows": 9, "checksum": 2, "snapshot_ts": 7},
        }
    }
    r = ksck.evaluate(s)
    assert not r["ok"] and r["tables"][0]["checksum"] == {"rows": 10, "mismatched_tablets": 1}
    assert any("replicas differ at snapshot 7" in e for e in r["errors"])
    s.checksums["t1"][C] = {"rows": 10, "checksum": 1, "snapshot_ts": 7}
    assert ksck.evaluate(s)["ok"]

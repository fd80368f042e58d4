"""The rebalancer's shell without a cluster: the placement and the safety verdict it reads off ksck's
snapshot, the per-server bound on concurrent moves, and the text report."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from kudu_async.common import rebalance as rb
from kudu_async.common.errors import KuduIllegalState
from kudu_async.common.retry import Deadline
from kudu_async.tools import ksck
from kudu_async.tools import rebalancer_tool as rt
from tests.unit.tools.ksck_layouts import ADDR, A, B, C, D
from tests.unit.tools.ksck_layouts import location as _loc


def _snap(
    layout: dict[str, tuple[str, list[str]]],
    live: tuple[str, ...] = (A, B, C, D),
    learners: dict[str, tuple[str, ...]] | None = None,
) -> ksck.Snapshot:
    """``layout``: tablet -> (leader, voters); every live server reports its replicas as RUNNING."""
    learners = learners or {}
    reports: dict[str, dict[str, dict[str, Any]]] = {u: {} for u in live}
    for tid, (leader, voters) in layout.items():
        for u in [*voters, *learners.get(tid, ())]:
            if u in live:
                reports[u][tid] = {
                    "tablet_id": tid,
                    "state": "RUNNING",
                    "term": 2,
                    "role": "LEADER" if u == leader else "FOLLOWER",
                    "config": {"voters": sorted(voters), "non_voters": list(learners.get(tid, ()))},
                }
    ts = [{"uuid": u, "rpc_address": ADDR[u], "live": u in live} for u in (A, B, C, D)]
    status = {u: {"uuid": u} for u in live}
    tablets = [_loc(tid, leader, voters, learners.get(tid, ())) for tid, (leader, voters) in layout.items()]
    return ksck.Snapshot(
        {}, ts, status, reports, [{"name": "t", "table_id": "tid", "num_replicas": 3, "tablets": tablets}]
    )


def test_healthy_snapshot_becomes_a_placement() -> None:
    view = rt.view_from_snapshot(_snap({"t1": (A, [A, B, C]), "t2": (B, [A, B, C])}))
    assert view.problems == [] and view.excluded == {}
    assert view.placement.servers == {A, B, C, D}
    assert {t.tablet_id: (t.leader, t.voters) for t in view.placement.tablets} == {
        "t1": (A, frozenset({A, B, C})),
        "t2": (B, frozenset({A, B, C})),
    }
    assert view.addresses[D] == ADDR[D]


def test_ignored_and_dead_servers_take_no_part() -> None:
    view = rt.view_from_snapshot(_snap({"t1": (A, [A, B, C])}, live=(A, B, C)), ignored=frozenset({C}))
    assert view.placement.servers == {A, B}
    assert "ignored" in view.excluded[C] and "not live" in view.excluded[D]
    assert view.problems == []


def test_unsafe_tablets_are_named() -> None:
    # C is down: t1 has a replica that is not running.
    view = rt.view_from_snapshot(_snap({"t1": (A, [A, B, C]), "t2": (A, [A, B, D])}, live=(A, B, D)))
    assert len(view.problems) == 1 and "tablet t1: UNDER_REPLICATED" in view.problems[0]
    # A learner in flight (a move or re-replication under way).
    view = rt.view_from_snapshot(_snap({"t1": (A, [A, B, C])}, learners={"t1": (D,)}))
    assert len(view.problems) == 1 and "config change is in flight" in view.problems[0] and D in view.problems[0]
    # No leader.
    snap = _snap({"t1": (A, [A, B, C])})
    snap.reports[A]["t1"]["role"] = "FOLLOWER"
    view = rt.view_from_snapshot(snap)
    assert "UNAVAILABLE" in view.problems[0] and "no replica is the leader" in view.problems[0]
    # Over-replicated (the master is about to trim it).
    view = rt.view_from_snapshot(_snap({"t1": (A, [A, B, C, D])}))
    assert "4 voters for replication factor 3" in view.problems[0]


def test_moves_run_concurrently_within_the_per_server_bound() -> None:
    items = [(f"t{i}", "src", f"dst{i % 3}") for i in range(9)] + [("t0", "x", "y")]
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    order: list[str] = []

    async def fn(item: tuple[str, str, str]) -> dict[str, Any]:
        tid, s, d = item
        assert running[tid] == 0, f"two moves of {tid} at once"
        running.update((s, d, tid))
        for u in (s, d):
            peak[u] = max(peak[u], running[u])
        await asyncio.sleep(0.01)
        running.subtract((s, d, tid))
        order.append(f"{tid}:{s}")
        return {"status": "done"}

    results = asyncio.run(rt.run_bounded(items, lambda i: (i[1], i[2]), lambda i: i[0], 2, fn, Deadline(10, "test")))
    assert all(r == {"status": "done"} for r in results)
    assert peak["src"] == 2  # bounded, and concurrent
    assert order.index("t0:src") < order.index("t0:x")  # one tablet's moves in plan order


def test_nothing_starts_after_the_deadline() -> None:
    async def fn(item: str) -> dict[str, Any]:
        return {"status": "done"}

    results = asyncio.run(rt.run_bounded(["a", "b"], lambda i: ("s",), lambda i: i, 1, fn, Deadline(-1, "t")))
    assert results == [None, None]


def test_bad_options_are_usage_errors() -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        rt.RebalanceOptions(leaders_only=True, replicas_only=True).check()
    with pytest.raises(ValueError, match="-max_moves_per_server"):
        rt.RebalanceOptions(max_moves_per_server=0).check()
    with pytest.raises(ValueError, match="-max_run_time_sec"):
        rt.RebalanceOptions(max_run_time_s=0).check()


def _report(**kw: Any) -> dict[str, Any]:
    p = rb.Placement(frozenset({A, B}), (rb.Tablet("t1", "t", frozenset({A}), A),))
    r: dict[str, Any] = {
        "dry_run": False,
        "replica_moves": [],
        "leader_transfers": [],
        "errors": [],
        "refused": [],
        "before": rb.summary(p),
        "after": rb.summary(p),
        "already_balanced": False,
        "ok": True,
        "balanced": True,
    }
    r.update(kw)
    return r


def test_text_report_verdicts() -> None:
    assert "already balanced; nothing to do" in rt.render(_report(already_balanced=True))
    refused = rt.render(_report(refused=["table t tablet t1: UNDER_REPLICATED: replica on c is TS_UNAVAILABLE"]))
    assert refused.startswith("refusing to rebalance: 1 tablet(s)") and "t1: UNDER_REPLICATED" in refused
    move = {"tablet": "t1", "table": "t", "from": A, "to": B, "status": "failed", "reason": "r", "error": "boom"}
    failed = rt.render(
        _report(ok=False, balanced=False, replica_moves=[move], left_to_do={"replica_moves": 1, "leader_transfers": 0})
    )
    assert "FAILED" in failed and "boom" in failed and failed.endswith("1 replica move(s), 0 leader transfer(s)")
    planned = rt.render(_report(dry_run=True, replica_moves=[{**move, "status": "planned"}]))
    assert "PLANNED" in planned and "nothing was changed" in planned and "[r]" in planned


class _FakeRpc:
    """Consensus calls of one tablet led by A with voters A, B, C (B lagging); servers in ``refuse``
    refuse the leadership."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.leader = A
        self.refuse = refuse
        self.calls: list[tuple[str, str]] = []

    async def call(self, addr: str, service: str, method: str, req: dict[str, Any], timeout_s: float) -> Any:
        who = next(u for u, a in ADDR.items() if a == addr)
        self.calls.append((who, method))
        if method == "GetState":
            peers = [{"uuid": u, "member_type": "VOTER", "match_index": 9 if u != B else 3} for u in (A, B, C)]
            return {
                "role": "LEADER" if who == self.leader else "FOLLOWER",
                "leader": self.leader,
                "term": 4,
                "commit_index": 9,
                "peers": peers,
            }
        if method == "TransferLeadership":
            if req["peer"] in self.refuse:
                raise KuduIllegalState(f"{req['peer']} refuses")
            self.leader = req["peer"]
            return {"leader": A}
        raise AssertionError(method)


class _FakeClient:
    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.rpc = _FakeRpc(refuse)


def test_a_refused_leader_transfer_falls_back_to_the_next_candidate() -> None:
    # The plan says B, then C; C is caught up and B is not, so C is asked first; C refuses, B takes over.
    client = _FakeClient(refuse=frozenset({C}))
    run = rt._Run(client, rt.RebalanceOptions(progress=False))  # type: ignore[arg-type]
    entry = asyncio.run(run.transfer(rb.LeaderTransfer("t1", "t", A, B, "r", alternatives=(C,)), ADDR))
    assert entry["status"] == "done" and entry["to"] == B and client.rpc.leader == B
    assert entry["refused_by"] == [f"{C}: ILLEGAL_STATE: {C} refuses"]


def test_a_transfer_nobody_takes_fails_with_every_reason() -> None:
    client = _FakeClient(refuse=frozenset({B, C}))
    run = rt._Run(client, rt.RebalanceOptions(progress=False))  # type: ignore[arg-type]
    entry = asyncio.run(run.transfer(rb.LeaderTransfer("t1", "t", A, B, "r", alternatives=(C,)), ADDR))
    assert entry["status"] == "failed" and client.rpc.leader == A
    assert f"{B} refuses (was not caught up)" in entry["error"] and f"{C} refuses" in entry["error"]


def test_a_transfer_whose_source_no_longer_leads_is_skipped() -> None:
    client = _FakeClient()
    client.rpc.leader = C
    run = rt._Run(client, rt.RebalanceOptions(progress=False))  # type: ignore[arg-type]
    entry = asyncio.run(run.transfer(rb.LeaderTransfer("t1", "t", A, B, "r"), ADDR))
    assert entry["status"] == "skipped" and C in entry["error"]

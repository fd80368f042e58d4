"""The auto-rebalancer's round planning: which servers and tablets take part, when a round must wait, and which
of the shared plan's moves a round starts."""

from __future__ import annotations

from kudu_async.common import rebalance as rb
from kudu_async.master.auto_rebalancer import move_done, round_view, select_moves
from kudu_async.master.rereplication import TabletView
from kudu_async.master.sys_catalog import TableRecord

SERVERS = ["a", "b", "c", "d", "e"]


def table(name: str, rf: int = 3) -> TableRecord:
    return TableRecord(
        id=f"id-{name}",
        name=name,
        state="RUNNING",
        schema={},
        schema_version=0,
        partition_schema={},
        num_replicas=rf,
        tablet_ids=(),
        created_at=0.0,
        owner=None,
        comment=None,
    )


def view(
    tid: str,
    voters: str,
    leader: str | None = "",
    rf: int = 3,
    non_voters: str = "",
    states: dict[str, str] | None = None,
) -> TabletView:
    """A tablet's view; ``leader`` "" is its first voter, None no leader."""
    members = set(voters) | set(non_voters)
    replica_states = {u: "RUNNING" for u in members} | (states or {})
    return TabletView(
        tid,
        rf,
        5,
        frozenset(voters),
        frozenset(non_voters),
        {u: f"{u}:7050" for u in members},
        sorted(voters)[0] if leader == "" else leader,
        replica_states,
    )


def test_round_view_leaves_out_maintenance_quiescing_and_rf1() -> None:
    t, single = table("t"), table("one", rf=1)
    rv = round_view(
        [(t, "t1", view("t1", "abc")), (t, "t2", view("t2", "abc")), (single, "s1", view("s1", "a", rf=1))],
        live=SERVERS,
        maintenance=["d"],
        quiescing=["e", "zz"],
    )
    assert rv.placement.servers == frozenset("abc")
    assert rv.excluded == {"d": "in maintenance mode", "e": "quiescing"}
    assert [x.tablet_id for x in rv.placement.tablets] == ["t1", "t2"]
    assert rv.problems == []


def test_round_view_lists_every_reason_to_wait() -> None:
    t = table("t")
    tablets = [
        (t, "nocfg", None),
        (t, "busy", view("busy", "abc")),
        (t, "learner", view("learner", "abc", non_voters="d")),
        (t, "extra", view("extra", "abcd")),
        (t, "dead", view("dead", "abz")),
        (t, "copying", view("copying", "abc", states={"c": "BOOTSTRAPPING"})),
        (t, "ok", view("ok", "abc")),
    ]
    rv = round_view(tablets, live=SERVERS, maintenance=[], quiescing=[], busy=["busy"])
    assert rv.problems == [
        "table t tablet nocfg: no config reported yet",
        "table t tablet busy: a config change is in flight",
        "table t tablet learner: a learner is being added (d)",
        "table t tablet extra: 4 voters for replication factor 3",
        "table t tablet dead: voter(s) on a tserver not live: z",
        "table t tablet copying: replica(s) not RUNNING on c",
    ]
    no_leader = round_view([(t, "nl", view("nl", "abc", leader=None))], SERVERS, [], [])
    assert no_leader.problems == ["table t tablet nl: no leader"]


def test_a_skewed_placement_gets_moves_to_the_new_servers_within_the_per_server_limit() -> None:
    t = table("t")
    rv = round_view([(t, f"t{i}", view(f"t{i}", "abc", leader="a")) for i in range(3)], SERVERS, [], [])
    moves = rb.plan_replica_moves(rv.placement)
    assert {m.dst for m in moves} == {"d", "e"} and len(moves) == 3  # 3,3,3,0,0 -> 2,2,2,2,1
    one = select_moves(moves, 1)
    assert 1 <= len(one) <= 2  # five servers, each move touches two: at most two moves with one per server
    touched = [u for m in one for u in (m.src, m.dst)]
    assert len(touched) == len(set(touched))
    two = select_moves(moves, 2)
    assert len({m.tablet_id for m in two}) == len(two)  # one move per tablet per round
    assert all(sum(u in (m.src, m.dst) for m in two) <= 2 for u in SERVERS)


def test_select_moves_takes_one_move_per_tablet() -> None:
    moves = [
        rb.Move("t1", "t", "a", "d", "r"),
        rb.Move("t1", "t", "b", "e", "r"),
        rb.Move("t2", "t", "b", "e", "r"),
    ]
    assert [(m.tablet_id, m.src) for m in select_moves(moves, 5)] == [("t1", "a"), ("t2", "b")]


def test_move_done_needs_the_destination_voting_and_the_source_gone() -> None:
    m = rb.Move("t1", "t", "a", "d", "r")
    assert not move_done(None, m)
    assert not move_done(view("t1", "abc", non_voters="d"), m)
    assert not move_done(view("t1", "abcd"), m)
    assert move_done(view("t1", "bcd"), m)

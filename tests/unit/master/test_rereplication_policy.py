"""The re-replication planner (Kudu's 3-4-3 scheme), driven by hand-built views: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from kudu_async.master.rereplication import (
    ADD_LEARNER,
    PROMOTE,
    REMOVE,
    Action,
    ChangeConfig,
    ClusterView,
    TabletView,
    Tombstone,
    plan,
)

SERVERS = ("a", "b", "c", "d", "e")


def addr(u: str) -> str:
    return f"127.0.0.1:{7050 + SERVERS.index(u)}"


def tablet(
    tid: str = "t1",
    voters: Iterable[str] = ("a", "b", "c"),
    non_voters: Iterable[str] = (),
    leader: str | None = "a",
    index: int = 5,
    states: dict[str, str] | None = None,
    hint: str | None = None,
    n: int = 3,
) -> TabletView:
    members = [*voters, *non_voters]
    reported = {u: "RUNNING" for u in voters}
    reported.update(states or {})
    return TabletView(
        tid, n, index, frozenset(voters), frozenset(non_voters), {u: addr(u) for u in members}, leader, reported, hint
    )


def cluster(
    live: Iterable[str] = ("a", "b", "d", "e"), failed: Iterable[str] = ("c",), load: dict[str, int] | None = None
) -> ClusterView:
    return ClusterView(
        frozenset(live),
        frozenset(failed),
        {u: addr(u) for u in SERVERS},
        load if load is not None else {u: 0 for u in live},
    )


def only(actions: list[Action]) -> ChangeConfig:
    assert len(actions) == 1, actions
    [a] = actions
    assert isinstance(a, ChangeConfig)
    return a


def changes(actions: list[Action]) -> list[ChangeConfig]:
    """Every action, each a config change."""
    assert all(isinstance(a, ChangeConfig) for a in actions), actions
    return [a for a in actions if isinstance(a, ChangeConfig)]


def test_healthy_tablet_needs_nothing() -> None:
    assert plan([tablet()], cluster(live=SERVERS, failed=())) == []


def test_voter_on_failed_server_gets_a_learner_on_the_least_loaded_live_server() -> None:
    a = only(plan([tablet()], cluster(load={"a": 1, "b": 1, "d": 4, "e": 2})))
    assert (a.op, a.peer, a.address, a.replacing) == (ADD_LEARNER, "e", addr("e"), "c")
    assert (a.leader, a.leader_address, a.cas_config_index) == ("a", addr("a"), 5)


def test_placement_ties_go_to_the_lowest_uuid_and_count_replicas_planned_in_the_same_pass() -> None:
    actions = plan([tablet("t1"), tablet("t2")], cluster())
    assert [(a.tablet_id, a.peer) for a in actions if isinstance(a, ChangeConfig)] == [("t1", "d"), ("t2", "e")]


def test_placement_skips_members_failed_servers_and_servers_holding_a_stale_replica() -> None:
    t = tablet(states={"d": "RUNNING"})  # d still holds an old replica: it is tombstoned first
    actions = plan([t], cluster())
    assert Tombstone("t1", "d", addr("d"), 5, "replica in state RUNNING is not in the config (index 5)") in actions
    assert [a.peer for a in actions if isinstance(a, ChangeConfig)] == ["e"]
    t = tablet(states={"d": "COPYING"})  # a copy in progress: not tombstoned under its feet, not a target
    assert [a.peer for a in changes(plan([t], cluster()))] == ["e"]
    t = tablet(states={"d": "TOMBSTONED"})  # a tombstone is no obstacle (the copy replaces it)
    assert only(plan([t], cluster(live=("a", "b", "d")))).peer == "d"


def test_no_live_server_outside_the_config_means_no_step() -> None:
    assert plan([tablet()], cluster(live=("a", "b"))) == []


def test_learner_is_promoted_only_once_its_copy_reports_running() -> None:
    cfg: dict[str, Any] = dict(voters=("a", "b", "c"), non_voters=("d",), index=6)
    assert plan([tablet(**cfg)], cluster()) == []  # d has not reported the tablet yet: copying
    assert plan([tablet(**cfg, states={"d": "BOOTSTRAPPING"})], cluster()) == []
    a = only(plan([tablet(**cfg, states={"d": "RUNNING"})], cluster()))
    assert (a.op, a.peer, a.cas_config_index) == (PROMOTE, "d", 6)


def test_learner_on_a_failed_server_is_removed_so_another_can_be_tried() -> None:
    a = only(
        plan([tablet(non_voters=("d",), states={"d": "RUNNING"})], cluster(live=("a", "b", "e"), failed=("c", "d")))
    )
    assert (a.op, a.peer) == (REMOVE, "d")
    a = only(plan([tablet(non_voters=("d",), states={"d": "FAILED"})], cluster()))
    assert (a.op, a.peer) == (REMOVE, "d")


def test_a_learner_whose_copy_never_comes_up_is_removed_so_another_server_can_be_tried() -> None:
    t = tablet(non_voters=("d",), states={"d": "TOMBSTONED"}, index=6)  # its copies keep failing
    stuck = ClusterView(
        frozenset(("a", "b", "d", "e")),
        frozenset(("c",)),
        {u: addr(u) for u in SERVERS},
        {u: 0 for u in SERVERS},
        stuck_learners=frozenset({("t1", "d")}),
    )
    a = only(plan([t], stuck))
    assert (a.op, a.peer, a.cas_config_index) == (REMOVE, "d", 6)
    assert plan([t], cluster()) == []  # not (yet) stuck: its copy is on the way
    # Once it is gone, the next pass places a learner again (the same server may well be tried again).
    assert only(plan([tablet(index=7)], cluster())).op == ADD_LEARNER


def test_failed_voter_is_removed_only_after_the_promotion() -> None:
    a = only(plan([tablet(voters=("a", "b", "c", "d"), index=7)], cluster()))
    assert (a.op, a.peer, a.cas_config_index) == (REMOVE, "c", 7)


def test_a_replica_reporting_failed_on_a_live_server_is_replaced_then_tombstoned() -> None:
    live = cluster(live=SERVERS, failed=())
    a = only(plan([tablet(states={"c": "FAILED"})], live))
    assert (a.op, a.peer, a.replacing) == (ADD_LEARNER, "d", "c")
    a = only(plan([tablet(voters=("a", "b", "c", "d"), states={"c": "FAILED"})], live))
    assert (a.op, a.peer) == (REMOVE, "c")
    [t] = plan([tablet(voters=("a", "b", "d"), states={"c": "FAILED"})], live)
    assert isinstance(t, Tombstone) and (t.server, t.address, t.cas_config_index) == ("c", addr("c"), 5)


def test_stale_replicas_are_tombstoned_only_on_live_servers_and_only_once() -> None:
    t = tablet(voters=("a", "b", "d"), states={"c": "RUNNING", "e": "TOMBSTONED"})
    assert plan([t], cluster(live=("a", "b", "d", "e"), failed=("c",))) == []  # c is down: cannot be asked
    [ts] = plan([t], cluster(live=SERVERS, failed=()))
    assert isinstance(ts, Tombstone) and ts.server == "c"


def test_no_config_change_without_a_confirmed_live_leader() -> None:
    assert plan([tablet(leader=None)], cluster()) == []
    assert plan([tablet(leader="c")], cluster()) == []  # the leader's server failed: wait for an election
    assert plan([tablet(leader="d")], cluster()) == []  # not even a voter (stale report)
    # Tombstones need no leader.
    [ts] = plan([tablet(leader=None, voters=("a", "b", "d"), states={"e": "RUNNING"})], cluster(failed=()))
    assert isinstance(ts, Tombstone) and ts.server == "e"


def test_lost_majority_is_left_alone_unless_evicting_one_failed_voter_restores_it() -> None:
    assert plan([tablet()], cluster(live=("a", "d", "e"), failed=("b", "c"))) == []
    a = only(plan([tablet(voters=("a", "b", "c", "d"), hint="c")], cluster(live=("a", "b", "e"), failed=("c", "d"))))
    assert (a.op, a.peer) == (REMOVE, "c")


def test_the_voter_being_replaced_is_the_one_removed() -> None:
    a = only(plan([tablet(voters=("a", "b", "c", "d"), hint="d")], cluster(live=("a", "b", "e"), failed=("c", "d"))))
    assert (a.op, a.peer) == (REMOVE, "d")


def test_extra_healthy_voter_is_trimmed_never_the_leader() -> None:
    every = cluster(live=SERVERS, failed=(), load={"a": 9, "b": 1, "c": 5, "d": 2, "e": 0})
    four: dict[str, Any] = dict(voters=("a", "b", "c", "d"), index=8)
    a = only(plan([tablet(**four, hint="b")], every))
    assert (a.op, a.peer, a.cas_config_index) == (REMOVE, "b", 8)  # the failed voter came back: it goes
    a = only(plan([tablet(**four)], every))
    assert (a.op, a.peer) == (REMOVE, "c")  # no hint: the most loaded server that is not the leader
    a = only(plan([tablet(**four, states={"d": "BOOTSTRAPPING"})], every))
    assert (a.op, a.peer) == (REMOVE, "d")  # a replica that is not running goes first
    a = only(plan([tablet(**four, leader="c")], every))
    assert (a.op, a.peer) == (REMOVE, "a")


def test_a_fresh_excess_is_left_to_the_operator_unless_the_master_knows_whom_it_replaces() -> None:
    """the kudu tool's move promotes its new replica and then removes the source: the master waits."""
    from dataclasses import replace

    every = cluster(live=SERVERS, failed=(), load={"a": 9, "b": 1, "c": 5, "d": 2, "e": 0})
    fresh = replace(every, fresh_excess=frozenset({"t1"}))
    four: dict[str, Any] = dict(voters=("a", "b", "c", "d"), index=8)
    assert plan([tablet(**four)], fresh) == []
    a = only(plan([tablet(**four, hint="b")], fresh))
    assert (a.op, a.peer) == (REMOVE, "b")  # its own replacement: no need to wait
    a = only(plan([tablet(**four, states={"c": "FAILED"})], fresh))
    assert (a.op, a.peer) == (REMOVE, "c")  # a failed voter still goes at once
    a = only(plan([tablet(**four)], every))
    assert (a.op, a.peer) == (REMOVE, "c")  # once the excess is no longer fresh


def test_at_most_max_concurrent_tablets_re_replicate_at_once() -> None:
    many = [tablet(f"t{i:02}") for i in range(15)]
    big = cluster(load={"a": 0, "b": 0, "d": 0, "e": 0})
    adds = plan(many, big, max_concurrent=10)
    assert [a.tablet_id for a in adds] == [f"t{i:02}" for i in range(10)]
    busy = [tablet(f"t{i:02}", non_voters=("d",)) for i in range(3)]
    adds = [a for a in changes(plan([*busy, *many[3:]], big, max_concurrent=10)) if a.op == ADD_LEARNER]
    assert len(adds) == 7
    adds = [
        a for a in changes(plan([*busy, *many[3:]], big, max_concurrent=10, in_flight_adds=2)) if a.op == ADD_LEARNER
    ]
    assert len(adds) == 5
    # Promotions and removals are never held back by the limit: they finish work in flight.
    done = [tablet(f"p{i:02}", non_voters=("d",), states={"d": "RUNNING"}) for i in range(12)]
    assert all(a.op == PROMOTE for a in changes(plan(done, big, max_concurrent=10)))
    assert len(plan(done, big, max_concurrent=10)) == 12


def test_plan_does_not_depend_on_input_order() -> None:
    ts = [tablet("t3"), tablet("t1", states={"c": "FAILED"}), tablet("t2", voters=("a", "b", "c", "d"))]
    c = cluster()
    assert plan(ts, c) == plan(list(reversed(ts)), c)


def test_tablet_without_a_reported_config_is_skipped() -> None:
    assert plan([tablet(voters=())], cluster()) == []


def test_three_four_three_walkthrough() -> None:
    """The whole sequence, each step's view being what the reports show after the previous one."""
    c = cluster()
    steps = []
    view = tablet()
    for states, voters, non_voters in [
        ({}, ("a", "b", "c"), ()),  # c failed: add d
        ({}, ("a", "b", "c"), ("d",)),  # copying: wait
        ({"d": "RUNNING"}, ("a", "b", "c"), ("d",)),  # promote d
        ({"d": "RUNNING"}, ("a", "b", "c", "d"), ()),  # remove c
        ({"d": "RUNNING"}, ("a", "b", "d"), ()),
    ]:  # done
        view = tablet(voters=voters, non_voters=non_voters, states=states, index=view.config_index + 1, hint="c")
        steps.append([(a.op, a.peer) for a in plan([view], c) if isinstance(a, ChangeConfig)])
    assert steps == [[(ADD_LEARNER, "d")], [], [(PROMOTE, "d")], [(REMOVE, "c")], []]


def test_the_catalog_manager_calls_a_learner_stuck_only_after_the_timeout_and_never_while_copying() -> None:
    from kudu_async.master.catalog_manager import CatalogManager

    cm = object.__new__(CatalogManager)  # only what _stuck_learners touches
    cm._learner_since = {}

    def views(*learners: tuple[str, str, str | None]) -> list[TabletView]:
        return [tablet(tid, non_voters=(u,), states={u: st} if st else {}) for tid, u, st in learners]

    first = views(("t1", "d", "TOMBSTONED"), ("t2", "e", "COPYING"), ("t3", "d", None), ("t4", "e", "RUNNING"))
    assert cm._stuck_learners(first, 100.0, 300.0) == frozenset()
    assert cm._stuck_learners(first, 350.0, 300.0) == frozenset()
    assert cm._stuck_learners(first, 401.0, 300.0) == frozenset({("t1", "d"), ("t3", "d")})
    # t1's learner left the config and a new one came: its clock starts again.
    assert cm._stuck_learners(views(("t1", "e", None)), 402.0, 300.0) == frozenset()
    assert cm._stuck_learners(views(("t1", "e", None)), 703.0, 300.0) == frozenset({("t1", "e")})


def in_maintenance(view: ClusterView, *servers: str) -> ClusterView:
    return replace(view, maintenance=frozenset(servers))


def test_voters_on_a_server_in_maintenance_are_not_replaced_however_long_it_is_down() -> None:
    down = cluster(live=("a", "b", "d", "e"), failed=("c",))
    assert only(plan([tablet()], down)).op == ADD_LEARNER  # without maintenance: replaced
    assert plan([tablet()], in_maintenance(down, "c")) == []


def test_maintenance_does_not_hide_a_failed_replica() -> None:
    broken = tablet(states={"c": "FAILED"})
    step = only(plan([broken], in_maintenance(cluster(live=SERVERS, failed=()), "c")))
    assert step.op == ADD_LEARNER and step.replacing == "c"


def test_no_new_replica_is_placed_on_a_server_in_maintenance() -> None:
    view = in_maintenance(cluster(load={"a": 1, "b": 1, "d": 0, "e": 5}), "d")
    step = only(plan([tablet()], view))
    assert step.op == ADD_LEARNER and step.peer == "e"


def test_a_kept_non_voter_is_never_promoted_and_its_server_gets_no_second_replica() -> None:
    """An operator's NON_VOTER (or a demoted voter) stays one: the master does not promote it, does not
    wait on it as on a learner in flight, and places a missing voter on another server."""
    live = cluster(live=SERVERS, failed=())
    kept = replace(tablet(voters=("a", "b", "c")), kept_non_voters=frozenset({"d"}))
    assert plan([kept], live) == []
    # a voter demoted: 2 voters for 3, a new learner goes to the one server without a replica
    demoted = replace(
        tablet(voters=("a", "b"), states={"c": "RUNNING"}),
        kept_non_voters=frozenset({"c"}),
        peers={u: addr(u) for u in "abc"},
    )
    a = only(plan([demoted], live))
    assert (a.op, a.peer) == (ADD_LEARNER, "d")  # c holds the demoted replica; d and e tie, the lower wins

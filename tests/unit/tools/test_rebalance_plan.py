"""The rebalancing planner on hand-made placements (no cluster): replicas per table then overall, a new
empty server, ignored servers, tablets that cannot move, leaders piled on one server, and the empty
plan of a balanced cluster."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from kudu_async.common import rebalance as rb
from kudu_async.common.rebalance import Placement, Tablet

A, B, C, D, E = "ts-a", "ts-b", "ts-c", "ts-d", "ts-e"


def _tablets(table: str, layouts: Sequence[tuple[str, ...]], leaders: list[str] | None = None) -> tuple[Tablet, ...]:
    return tuple(
        Tablet(f"{table}-{i:02d}", table, frozenset(v), (leaders[i] if leaders else v[0]))
        for i, v in enumerate(layouts)
    )


def _balanced_after(p: Placement, moves: list[rb.Move]) -> Placement:
    after = rb.apply_moves(p, moves)
    per_table, overall = rb.replica_counts(after)
    assert rb.spread(overall) <= 1, overall
    assert all(rb.spread(c) <= 1 for c in per_table.values()), per_table
    return after


def _valid(p: Placement, moves: list[rb.Move]) -> None:
    """Every move, done in order, is from a holder to a non-holder among the balanced servers, and never
    off a server the same tablet was moved to earlier in the plan."""
    moved_to: dict[str, set[str]] = {}
    for m in moves:
        t = next(t for t in p.tablets if t.tablet_id == m.tablet_id)
        assert m.src in t.voters and m.dst not in t.voters
        assert m.src in p.servers and m.dst in p.servers
        if m.leader_to is not None:  # only a leading source hands over, and to another voter
            assert t.leader == m.src and m.leader_to in t.voters - {m.src}
        elif t.leader == m.src:
            assert t.voters == {m.src}  # nobody to hand over to: replication factor 1
        assert m.src not in moved_to.get(m.tablet_id, set())
        moved_to.setdefault(m.tablet_id, set()).add(m.dst)
        p = rb.apply_moves(p, [m])


def test_new_empty_server_gets_its_share() -> None:
    # A 6-tablet x 3-replica table on A, B, C, then D joins: 18 replicas over 4 servers -> 5/5/4/4.
    p = Placement(frozenset({A, B, C, D}), _tablets("t", [(A, B, C)] * 6, leaders=[A, B, C, A, B, C]))
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    assert len(moves) == 4 and {m.dst for m in moves} == {D}
    after = _balanced_after(p, moves)
    assert sorted(rb.replica_counts(after)[1].values()) == [4, 4, 5, 5]
    assert all(m.leader_to is None for m in moves)  # followers are moved, leaders stay put


def test_each_table_is_balanced_first_then_the_cluster() -> None:
    # Table q (4 tablets x RF 1) all on A: a table skew. Tables x, y, z (1 tablet each) on A: each table is
    # within one, but A then holds 7 replicas of 7: only the cluster-wide pass can fix that.
    p = Placement(
        frozenset({A, B, C}),
        _tablets("q", [(A,)] * 4) + _tablets("x", [(A,)]) + _tablets("y", [(A,)]) + _tablets("z", [(A,)]),
    )
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    kinds = [m.reason.split(":")[0] for m in moves]
    assert kinds == sorted(kinds, key=lambda k: k.startswith("cluster"))  # every table move comes first
    assert set(kinds) == {"table q", "cluster"}
    after = _balanced_after(p, moves)
    assert sorted(rb.replica_counts(after)[1].values()) == [2, 2, 3]


def test_two_skewed_tables_and_an_empty_server() -> None:
    # Table x is piled on A, B, C; table y on B, C, D; E is empty: 24 replicas over 5 servers.
    p = Placement(frozenset({A, B, C, D, E}), _tablets("x", [(A, B, C)] * 4) + _tablets("y", [(B, C, D)] * 4))
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    after = _balanced_after(p, moves)
    per_table, overall = rb.replica_counts(after)
    assert sorted(overall.values()) == [4, 5, 5, 5, 5]
    assert per_table["x"][E] >= 2 and per_table["y"][E] >= 2


def test_imbalanced_table_on_an_otherwise_balanced_cluster() -> None:
    # Two tables, each skewed, overall even: 3 tablets x RF 1 of x on A, 3 of y on B, C/D empty.
    p = Placement(frozenset({A, B, C, D}), _tablets("x", [(A,)] * 3) + _tablets("y", [(B,)] * 3))
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    after = _balanced_after(p, moves)
    per_table, _ = rb.replica_counts(after)
    assert max(per_table["x"].values()) == 1 and max(per_table["y"].values()) == 1


def test_ignored_server_is_neither_source_nor_target_nor_counted() -> None:
    # E (ignored) holds a replica of everything and is not balanced; D is empty and balanced.
    p = Placement(frozenset({A, B, C, D}), _tablets("t", [(A, B, E)] * 4 + [(C, A, E)] * 2))
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    assert all(E not in (m.src, m.dst) for m in moves)
    after = _balanced_after(p, moves)
    assert all(E in t.voters for t in after.tablets)
    assert set(rb.replica_counts(after)[1]) == {A, B, C, D}


def test_tablet_on_every_server_cannot_move() -> None:
    # t-00 lives on all of A, B, C (RF 3 on 3 servers); the spread cannot change and nothing is planned.
    p = Placement(frozenset({A, B, C}), _tablets("t", [(A, B, C)] * 3))
    assert rb.plan_replica_moves(p) == []
    # With a fourth server only the tablets not already everywhere move; the RF-4 one stays put.
    wide = Tablet("w-00", "w", frozenset({A, B, C, D}), A)
    p = Placement(frozenset({A, B, C, D}), (wide, *_tablets("t", [(A, B)] * 4)))
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    assert moves and all(m.tablet_id != "w-00" for m in moves)
    _balanced_after(p, moves)


def test_moving_a_leader_replica_names_who_takes_over() -> None:
    # Only one tablet can fix the table's skew and A leads it: the move hands leadership over first.
    p = Placement(
        frozenset({A, B, C, D}), (Tablet("t-00", "t", frozenset({A, B}), A), Tablet("t-01", "t", frozenset({A, C}), A))
    )
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    assert len(moves) == 1 and moves[0].src == A and moves[0].dst == D
    assert moves[0].leader_to is not None and moves[0].leader_to != A
    after = rb.apply_moves(p, moves)
    assert {t.tablet_id: t.leader for t in after.tablets}[moves[0].tablet_id] == moves[0].leader_to


def test_a_single_replica_tablet_moves_with_its_leadership() -> None:
    # Replication factor 1: the source is the only voter, nobody to hand over to; the new replica leads.
    p = Placement(frozenset({A, B}), _tablets("t", [(A,)] * 2))
    moves = rb.plan_replica_moves(p)
    _valid(p, moves)
    assert len(moves) == 1 and moves[0].leader_to is None
    after = rb.apply_moves(p, moves)
    assert rb.leader_counts(after)[1] == {A: 1, B: 1}


def test_already_balanced_cluster_gets_an_empty_plan() -> None:
    layouts = [tuple(c) for c in itertools.combinations([A, B, C, D], 3)]  # 4 tablets, each server 3
    leaders = [A, B, C, D]
    p = Placement(
        frozenset({A, B, C, D}),
        _tablets("t", layouts, [lead if lead in lay else lay[0] for lead, lay in zip(leaders, layouts, strict=True)]),
    )
    assert rb.plan_replica_moves(p) == []
    _, lo = rb.leader_counts(p)
    assert rb.spread(lo) <= 1
    assert rb.plan_leader_transfers(p) == []
    assert rb.plan_replica_moves(Placement(frozenset(), ())) == []
    assert rb.plan_leader_transfers(Placement(frozenset({A}), ())) == []


def test_leaders_piled_on_one_server_are_spread() -> None:
    # 6 tablets x 3 replicas on A, B, C, all led by A: 2 each afterwards.
    p = Placement(frozenset({A, B, C}), _tablets("t", [(A, B, C)] * 6, leaders=[A] * 6))
    xs = rb.plan_leader_transfers(p)
    assert len(xs) == 4 and all(x.src == A for x in xs) and len({x.tablet_id for x in xs}) == 4
    after = rb.apply_transfers(p, xs)
    assert sorted(rb.leader_counts(after)[1].values()) == [2, 2, 2]
    assert all(x.dst in next(t for t in p.tablets if t.tablet_id == x.tablet_id).voters for x in xs)


def test_leaders_follow_placement_and_skip_ignored_servers() -> None:
    # D holds replicas of t-00/t-01 only; E (not balanced) holds everything and must not be given leaders.
    tab = (
        Tablet("t-00", "t", frozenset({A, D, E}), A),
        Tablet("t-01", "t", frozenset({A, D, E}), A),
        Tablet("t-02", "t", frozenset({A, B, E}), A),
        Tablet("t-03", "t", frozenset({A, C, E}), A),
    )
    p = Placement(frozenset({A, B, C, D}), tab)
    xs = rb.plan_leader_transfers(p)
    assert all(x.dst != E and E not in x.alternatives for x in xs)
    after = rb.apply_transfers(p, xs)
    assert rb.spread(rb.leader_counts(after)[1]) <= 1


def test_leaders_per_table_then_overall() -> None:
    # Table x led by A (3 tablets), table y led by B (3): per table each spreads over A, B, C.
    x = _tablets("x", [(A, B, C)] * 3, leaders=[A] * 3)
    y = _tablets("y", [(A, B, C)] * 3, leaders=[B] * 3)
    p = Placement(frozenset({A, B, C}), x + y)
    after = rb.apply_transfers(p, rb.plan_leader_transfers(p))
    per_table, overall = rb.leader_counts(after)
    assert all(rb.spread(c) <= 1 for c in per_table.values()) and sorted(overall.values()) == [2, 2, 2]


def test_leader_transfer_offers_alternatives() -> None:
    p = Placement(frozenset({A, B, C, D}), _tablets("t", [(A, B, C, D)] * 4, leaders=[A] * 4))
    xs = rb.plan_leader_transfers(p)
    assert xs[0].alternatives and xs[0].dst not in xs[0].alternatives and A not in xs[0].alternatives


def test_plans_are_deterministic() -> None:
    p = Placement(frozenset({A, B, C, D, E}), _tablets("x", [(A, B, C)] * 5) + _tablets("y", [(C, D, A)] * 5))
    assert rb.plan_replica_moves(p) == rb.plan_replica_moves(Placement(p.servers, tuple(reversed(p.tablets))))
    assert rb.plan_leader_transfers(p) == rb.plan_leader_transfers(p)


def test_bad_placements_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="t-00"):
        Placement(frozenset({A}), (Tablet("t-00", "t", frozenset({A})), Tablet("t-00", "t", frozenset({A}))))
    with pytest.raises(ValueError, match="leader ts-b"):
        Placement(frozenset({A}), (Tablet("t-00", "t", frozenset({A}), B),))
    p = Placement(frozenset({A, B}), (Tablet("t-00", "t", frozenset({A}), A),))
    with pytest.raises(ValueError, match="t-00"):
        rb.apply_moves(p, [rb.Move("t-00", "t", B, A, "bad")])


def test_random_placements_end_balanced_in_one_plan() -> None:
    # Seeded random clusters: 2-6 servers (some empty, as after adding machines), 1-4 tables of RF 1-3.
    rng = random.Random(7)
    for _ in range(300):
        servers = [f"ts-{i}" for i in range(rng.randint(2, 6))]
        used = servers[: rng.randint(1, len(servers))]  # the servers the tables were created on
        tablets: list[Tablet] = []
        for tb in range(rng.randint(1, 4)):
            rf = rng.randint(1, min(3, len(used)))
            for i in range(rng.randint(1, 8)):
                voters = rng.sample(used, rf)
                tablets.append(Tablet(f"t{tb}-{i}", f"t{tb}", frozenset(voters), rng.choice(voters)))
        p = Placement(frozenset(servers), tuple(tablets))
        moves = rb.plan_replica_moves(p)
        _valid(p, moves)
        after = _balanced_after(p, moves)
        leaders_after = rb.apply_transfers(after, rb.plan_leader_transfers(after))
        assert rb.replica_counts(leaders_after) == rb.replica_counts(after)
        assert rb.plan_leader_transfers(leaders_after) == []

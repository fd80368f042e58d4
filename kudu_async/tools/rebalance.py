"""The rebalancing plan of ``kudu cluster rebalance``: which replicas to move and which leaderships
to hand over so that every live tablet server carries its share. Sans-IO: a :class:`Placement` (servers,
tablets, the servers holding each tablet's voters, its leader) in, a list of :class:`Move` or
:class:`LeaderTransfer` out, deterministic (ties are broken by uuid and tablet id). The asyncio shell that
gathers the placement and carries the plan out is ``rebalancer_tool``.

Replicas, in Kudu's order: first each table on its own (the replicas of one table spread so that no
balanced server holds two more than another), then the cluster as a whole (replicas of every table in
scope per server), with moves that never make any table less balanced. A move goes from a server with
more to one with fewer replicas that holds no replica of that tablet. Counting argument: if server ``a``
holds more replicas of a table than ``b``, some tablet of it is on ``a`` and not on ``b``; and if ``a``
holds more replicas overall, some table has more on ``a`` than on ``b``. So whenever two servers differ
by two or more, in a table or overall, a move between them exists and the plan reaches a spread of at
most one. A tablet may move more than once in a plan (from different servers; the shell runs a tablet's
moves one at a time, in plan order); moving it on from a server the plan just moved it to changes that
earlier move's target instead, so nothing is copied twice. The one thing never planned is undoing an
earlier move (back to where it came from), which in rare cases leaves a pair without a move: the shell
plans again after carrying a plan out.

Leaders, after replicas: per table, then overall, a transfer goes from the server leading more tablets
to a server holding a voter of that tablet with two fewer leaders or more. Unlike replicas, placement
may make a perfect spread impossible (no replica of the piled-up tablets on the idle server): the plan
stops when no transfer helps.

Servers outside ``Placement.servers`` (ignored by the operator, dead, unreachable) never gain or lose a
replica or a leadership here and are not counted; their replicas still keep a tablet off them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Tablet:
    """One tablet: its table, the servers holding its voters (balanced or not), its leader if known."""

    tablet_id: str
    table: str
    voters: frozenset[str]
    leader: str | None = None


@dataclass(frozen=True)
class Placement:
    """What the plan is made from: the servers taking part in balancing and every tablet in scope."""

    servers: frozenset[str]
    tablets: tuple[Tablet, ...]

    def __post_init__(self) -> None:
        ids = [t.tablet_id for t in self.tablets]
        if len(ids) != len(set(ids)):
            raise ValueError(f"tablet ids repeat in the placement: {sorted({i for i in ids if ids.count(i) > 1})}")
        for t in self.tablets:
            if t.leader is not None and t.leader not in t.voters:
                raise ValueError(f"tablet {t.tablet_id}: leader {t.leader} is not one of its voters {sorted(t.voters)}")


@dataclass(frozen=True)
class Move:
    """Move the replica of ``tablet_id`` on ``src`` to ``dst``. ``leader_to``: when ``src`` leads the
    tablet, the voter that takes over before the copy (a balanced one if there is one); None if ``src`` is
    its only voter (then ``dst`` leads after the move)."""

    tablet_id: str
    table: str
    src: str
    dst: str
    reason: str
    leader_to: str | None = None


@dataclass(frozen=True)
class LeaderTransfer:
    """Hand the leadership of ``tablet_id`` from ``src`` to ``dst``; if ``dst`` refuses, ``alternatives``
    (voters that would also do, best first)."""

    tablet_id: str
    table: str
    src: str
    dst: str
    reason: str
    alternatives: tuple[str, ...] = field(default=())


# --- counting ------------------------------------------------------------------------------------------


def replica_counts(p: Placement) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """(table -> server -> replicas, server -> replicas), over the balanced servers only (zeros included)."""
    per_table: dict[str, dict[str, int]] = {}
    overall = dict.fromkeys(sorted(p.servers), 0)
    for t in p.tablets:
        counts = per_table.setdefault(t.table, dict.fromkeys(sorted(p.servers), 0))
        for u in t.voters & p.servers:
            counts[u] += 1
            overall[u] += 1
    return per_table, overall


def leader_counts(p: Placement) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """(table -> server -> leaders, server -> leaders), over the balanced servers only (zeros included)."""
    per_table: dict[str, dict[str, int]] = {}
    overall = dict.fromkeys(sorted(p.servers), 0)
    for t in p.tablets:
        counts = per_table.setdefault(t.table, dict.fromkeys(sorted(p.servers), 0))
        if t.leader in p.servers:
            counts[t.leader] += 1
            overall[t.leader] += 1
    return per_table, overall


def spread(counts: Mapping[str, int]) -> int:
    """Most minus fewest (0 for no servers)."""
    return max(counts.values()) - min(counts.values()) if counts else 0


def summary(p: Placement) -> dict[str, object]:
    """Counts and spreads for the report: per server and per table, replicas and leaders."""
    rt, ro = replica_counts(p)
    lt, lo = leader_counts(p)
    return {
        "replicas": ro,
        "leaders": lo,
        "replica_spread": spread(ro),
        "leader_spread": spread(lo),
        "table_replica_spread": {t: spread(c) for t, c in sorted(rt.items())},
        "table_leader_spread": {t: spread(c) for t, c in sorted(lt.items())},
    }


# --- the greedy loop both plans share -------------------------------------------------------------------


def _greedy(
    per_table: dict[str, dict[str, int]],
    overall: dict[str, int],
    pick: Callable[[str, str, str], Tablet | None],
    do: Callable[[Tablet, str, str, str], None],
    noun: str,
) -> None:
    """Even out ``per_table`` counts (each table on its own), then ``overall`` counts with steps that take
    from a table with more on the source than on the target (so no table's spread widens), and again
    until neither finds a step. ``pick(table, src, dst)``: a tablet of ``table`` to take from ``src`` to
    ``dst``, or None; ``do(tablet, src, dst, reason)`` plans it and updates the counts.

    Terminates: a per-table step lowers the sum of squared per-table counts; an overall step lowers the
    sum of squared overall counts and does not raise the per-table one."""

    def pairs(c: Mapping[str, int]) -> list[tuple[str, str]]:
        """(src, dst) with src two or more above dst: widest first, then by the overall difference."""
        return sorted(
            ((s, d) for s in c for d in c if c[s] - c[d] >= 2),
            key=lambda sd: (-(c[sd[0]] - c[sd[1]]), -(overall[sd[0]] - overall[sd[1]]), sd),
        )

    while True:
        steps = 0
        for table in sorted(per_table):
            c = per_table[table]
            while (
                step := next(((s, d, t) for s, d in pairs(c) if (t := pick(table, s, d)) is not None), None)
            ) is not None:
                s, d, t = step
                do(t, s, d, f"table {table}: {s} has {c[s]} {noun}, {d} has {c[d]}")
                steps += 1
        while True:
            step = None
            for s, d in pairs(overall):
                tables = sorted(
                    (tb for tb, c in per_table.items() if c[s] > c[d]),
                    key=lambda tb: (-(per_table[tb][s] - per_table[tb][d]), tb),
                )
                step = next(((s, d, t) for tb in tables if (t := pick(tb, s, d)) is not None), None)
                if step is not None:
                    break
            if step is None:
                break
            s, d, t = step
            do(t, s, d, f"cluster: {s} has {overall[s]} {noun}, {d} has {overall[d]}")
            steps += 1
        if not steps:
            return


# --- replicas -------------------------------------------------------------------------------------------


def plan_replica_moves(p: Placement) -> list[Move]:
    """Replica moves that even out each table, then the cluster (see the module docstring)."""
    tablets = {t.tablet_id: t for t in p.tablets}
    per_table, overall = replica_counts(p)
    _, leaders = leader_counts(p)
    out: list[Move] = []
    placed: dict[tuple[str, str], int] = {}  # (tablet, server) -> the planned move that puts it there

    def do(t: Tablet, src: str, dst: str, reason: str) -> None:
        earlier = placed.pop((t.tablet_id, src), None)
        # Moving a tablet on from where this plan just put it: the earlier move goes to dst instead.
        leader_to = out[earlier].leader_to if earlier is not None else None
        new_leader = t.leader
        if t.leader == src:
            # Hand over (before the copy) to the balanced voter leading least, else to any other voter; with
            # none (replication factor 1) dst leads once src is gone. Leader balancing follows anyway.
            options = sorted((t.voters & p.servers) - {src}, key=lambda u: (leaders[u], u))
            options += sorted(t.voters - p.servers - {src})
            leader_to = options[0] if options else None
            new_leader = leader_to or dst
            leaders[src] -= 1
            if new_leader in leaders:
                leaders[new_leader] += 1
        if earlier is None:
            placed[(t.tablet_id, dst)] = len(out)
            out.append(Move(t.tablet_id, t.table, src, dst, reason, leader_to))
        else:
            placed[(t.tablet_id, dst)] = earlier
            out[earlier] = replace(
                out[earlier], dst=dst, leader_to=leader_to, reason=f"{out[earlier].reason}; then {reason}"
            )
        tablets[t.tablet_id] = replace(t, voters=t.voters - {src} | {dst}, leader=new_leader)
        per_table[t.table][src] -= 1
        per_table[t.table][dst] += 1
        overall[src] -= 1
        overall[dst] += 1

    def movable(table: str, src: str, dst: str) -> Tablet | None:
        """A tablet of ``table`` on ``src`` and not on ``dst``: best one not moved by the plan yet, then
        one ``src`` does not lead. Not one the plan moved from ``dst`` to ``src`` (that would undo it)."""
        cands = [
            t
            for t in tablets.values()
            if t.table == table
            and src in t.voters
            and dst not in t.voters
            and not ((i := placed.get((t.tablet_id, src))) is not None and out[i].src == dst)
        ]
        return min(cands, key=lambda t: ((t.tablet_id, src) in placed, t.leader == src, t.tablet_id)) if cands else None

    _greedy(per_table, overall, movable, do, "replicas")
    return out


def apply_moves(p: Placement, moves: Iterable[Move]) -> Placement:
    """The placement once ``moves`` are done (leaders as planned): what the leader plan of a dry run uses."""
    by_id = {t.tablet_id: t for t in p.tablets}
    for m in moves:
        t = by_id[m.tablet_id]
        if m.src not in t.voters or m.dst in t.voters:
            raise ValueError(
                f"move of {m.tablet_id} from {m.src} to {m.dst} does not fit its voters {sorted(t.voters)}"
            )
        leader = (m.leader_to or m.dst) if t.leader == m.src else t.leader
        by_id[m.tablet_id] = replace(t, voters=t.voters - {m.src} | {m.dst}, leader=leader)
    return Placement(p.servers, tuple(by_id[t.tablet_id] for t in p.tablets))


# --- leaders --------------------------------------------------------------------------------------------


def plan_leader_transfers(p: Placement) -> list[LeaderTransfer]:
    """Leadership transfers that even out leaders per table, then overall (see the module docstring)."""
    tablets = {t.tablet_id: t for t in p.tablets}
    per_table, overall = leader_counts(p)
    out: list[LeaderTransfer] = []
    planned: dict[str, int] = {}  # tablet -> its planned transfer

    def candidates(table: str, src: str, dst: str) -> list[Tablet]:
        """Tablets ``src`` leads with a voter on ``dst``, not planned yet first; not one whose planned
        transfer came from ``dst`` (that would undo it)."""
        return sorted(
            (
                t
                for t in tablets.values()
                if t.table == table
                and t.leader == src
                and dst in t.voters
                and not (t.tablet_id in planned and out[planned[t.tablet_id]].src == dst)
            ),
            key=lambda t: (t.tablet_id in planned, t.tablet_id),
        )

    def do(t: Tablet, src: str, dst: str, reason: str) -> None:
        tc = per_table[t.table]
        earlier = planned.get(t.tablet_id)
        first = out[earlier].src if earlier is not None else src  # who leads before the plan
        # Fallbacks: other balanced voters that would still narrow both spreads if they took over.
        alts = sorted(
            (
                u
                for u in (t.voters & p.servers) - {src, dst, first}
                if overall[src] - overall[u] >= 2 and tc[src] - tc[u] >= 1
            ),
            key=lambda u: (overall[u], tc[u], u),
        )
        if earlier is None:
            planned[t.tablet_id] = len(out)
            out.append(LeaderTransfer(t.tablet_id, t.table, src, dst, reason, tuple(alts)))
        else:  # handing it on from where the plan just put it: the earlier transfer goes to dst instead
            out[earlier] = replace(
                out[earlier], dst=dst, alternatives=tuple(alts), reason=f"{out[earlier].reason}; then {reason}"
            )
        tablets[t.tablet_id] = replace(t, leader=dst)
        tc[src] -= 1
        tc[dst] += 1
        overall[src] -= 1
        overall[dst] += 1

    _greedy(per_table, overall, lambda tb, src, dst: next(iter(candidates(tb, src, dst)), None), do, "leaders")
    return out


def apply_transfers(p: Placement, transfers: Iterable[LeaderTransfer]) -> Placement:
    """The placement once ``transfers`` are done."""
    by_id = {t.tablet_id: t for t in p.tablets}
    for x in transfers:
        t = by_id[x.tablet_id]
        if t.leader != x.src or x.dst not in t.voters:
            raise ValueError(
                f"transfer of {x.tablet_id} from {x.src} to {x.dst} does not fit: leader {t.leader}, "
                f"voters {sorted(t.voters)}"
            )
        by_id[x.tablet_id] = replace(t, leader=x.dst)
    return Placement(p.servers, tuple(by_id[t.tablet_id] for t in p.tablets))

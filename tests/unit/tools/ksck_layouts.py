"""Hand-made tablet locations for tests of ksck and of the rebalancer built on its snapshot."""

from __future__ import annotations

from typing import Any

A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32
ADDR = {A: "127.0.0.1:1", B: "127.0.0.1:2", C: "127.0.0.1:3", D: "127.0.0.1:4"}


def location(tid: str, leader: str, voters: list[str], learners: tuple[str, ...] = ()) -> dict[str, Any]:
    """The master's GetTableLocations entry of one tablet: ``leader`` leads, the voters follow."""
    reps = [{"uuid": u, "rpc_address": ADDR[u], "role": "LEADER" if u == leader else "FOLLOWER"} for u in voters]
    reps += [{"uuid": u, "rpc_address": ADDR[u], "role": "LEARNER"} for u in learners]
    return {"tablet_id": tid, "replicas": reps}

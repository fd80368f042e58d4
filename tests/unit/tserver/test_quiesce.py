"""The choice of a successor for a quiescing leader: a pure function of the leader's view of its peers."""

from __future__ import annotations

from typing import Any

from kudu_async.tserver.quiesce import MAX_SUCCESSOR_SILENCE_MS, successor


def peer(uuid: str, match: int | None, silent_ms: int | None = 10, member_type: str = "VOTER") -> dict[str, Any]:
    return {"uuid": uuid, "member_type": member_type, "match_index": match, "last_contact_ms_ago": silent_ms}


def test_the_most_caught_up_recently_heard_voter_succeeds() -> None:
    peers = [peer("a", 100), peer("b", 90), peer("c", 100, silent_ms=400)]
    assert successor(peers, "a", 100) == "c"
    assert successor(peers, "a", 100, max_silence_ms=300) == "b"
    assert successor([*peers, peer("d", 100, silent_ms=5)], "a", 100) == "d"  # ties: heard from last


def test_learners_silent_servers_and_servers_to_avoid_never_succeed() -> None:
    peers = [
        peer("a", 100),
        peer("l", 100, member_type="NON_VOTER"),
        peer("s", 100, silent_ms=MAX_SUCCESSOR_SILENCE_MS + 1),
        peer("q", 100),
        peer("n", None),  # a follower the leader tracks no progress of
        peer("u", 100, silent_ms=None),  # never heard from
    ]
    assert successor(peers, "a", 100, avoid=["q"]) is None
    assert successor(peers, "a", 100) == "q"


def test_a_single_replica_tablet_has_no_successor() -> None:
    assert successor([peer("a", 7)], "a", 7) is None

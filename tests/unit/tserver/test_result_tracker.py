"""The tablet's ResultTracker: outcomes of a lookup, forgetting (first_incomplete_seq_no, TTLs, bounds) and
the validation of a Write's request_id."""

from __future__ import annotations

from typing import Any

import pytest

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.tserver.result_tracker import (
    CLIENT_TTL_S,
    MAX_CLIENT_ID_LEN,
    RESPONSE_TTL_S,
    Outcome,
    RequestId,
    ResultTracker,
    parse_request_id,
)


def rid(seq: int, first: int | None = None, client: str = "c1") -> RequestId:
    return RequestId(client, seq, seq if first is None else first)


def test_a_new_request_is_marked_in_progress_until_completed() -> None:
    t = ResultTracker()
    assert t.start(rid(1), 0.0).outcome is Outcome.NEW
    assert t.start(rid(1), 0.1).outcome is Outcome.IN_PROGRESS
    t.complete(rid(1), {"timestamp": 7}, 0.2)
    look = t.start(rid(1), 0.3)
    assert look.outcome is Outcome.COMPLETED and look.response == {"timestamp": 7}
    assert t.stats() == {"clients": 1, "responses": 1, "in_progress": 0, "duplicates_answered": 1, "stale_rejected": 0}


def test_the_first_recorded_response_stays() -> None:
    t = ResultTracker()
    t.complete(rid(1), "first", 0.0)
    t.complete(rid(1), "second", 0.0)
    assert t.peek("c1", 1).response == "first"


def test_a_follower_records_a_result_it_never_saw_start() -> None:
    t = ResultTracker()
    t.complete(rid(5), "applied", 0.0)  # applied from the WAL: this replica never saw the RPC
    assert t.start(rid(5), 1.0).response == "applied"


def test_abandon_leaves_no_trace_but_keeps_a_completed_response() -> None:
    t = ResultTracker()
    assert t.start(rid(1), 0.0).outcome is Outcome.NEW
    t.abandon("c1", 1)
    assert t.peek("c1", 1).outcome is Outcome.NEW
    assert t.start(rid(1), 0.0).outcome is Outcome.NEW
    t.complete(rid(1), "done", 0.0)
    t.abandon("c1", 1)
    assert t.peek("c1", 1).outcome is Outcome.COMPLETED
    t.abandon("nobody", 3)  # unknown: nothing to do


def test_clients_are_separate() -> None:
    t = ResultTracker()
    t.complete(rid(1, client="a"), "a1", 0.0)
    assert t.start(rid(1, client="b"), 0.0).outcome is Outcome.NEW
    assert t.peek("a", 1).response == "a1"


def test_first_incomplete_seq_no_forgets_and_older_requests_are_stale() -> None:
    t = ResultTracker()
    for s in (1, 2, 3):
        t.start(rid(s, first=1), 0.0)
        t.complete(rid(s, first=1), f"r{s}", 0.0)
    assert t.num_responses() == 3
    assert t.start(rid(4, first=3), 0.0).outcome is Outcome.NEW  # client: 1 and 2 are done
    assert t.num_responses() == 1
    assert t.start(rid(2, first=2), 0.0).outcome is Outcome.STALE
    assert t.start(rid(3, first=3), 0.0).response == "r3"  # still remembered
    assert t.stats()["stale_rejected"] == 1


def test_a_request_never_makes_itself_stale() -> None:
    t = ResultTracker()
    assert t.start(rid(5, first=6), 0.0).outcome is Outcome.NEW  # first_incomplete = seq_no + 1 is allowed
    t.complete(rid(5, first=6), "r5", 0.0)
    assert t.start(rid(5, first=6), 0.0).response == "r5"


def test_completing_below_the_watermark_records_nothing() -> None:
    t = ResultTracker()
    t.start(rid(10, first=10), 0.0)
    t.complete(rid(3, first=3), "late", 0.0)
    assert t.peek("c1", 3).outcome is Outcome.STALE


def test_responses_expire_after_their_ttl_and_then_are_stale() -> None:
    t = ResultTracker(response_ttl_s=10.0, gc_interval_s=1.0)
    t.complete(rid(1, first=1), "r1", 0.0)
    t.complete(rid(2, first=1), "r2", 5.0)
    t.gc(11.0)
    assert t.peek("c1", 1).outcome is Outcome.STALE
    assert t.peek("c1", 2).response == "r2"
    t.start(rid(3, first=1), 16.0)  # gc runs by itself once gc_interval_s has passed
    assert t.peek("c1", 2).outcome is Outcome.STALE
    assert t.peek("c1", 3).outcome is Outcome.IN_PROGRESS


def test_idle_clients_are_forgotten_after_their_ttl_unless_a_write_is_in_progress() -> None:
    t = ResultTracker()
    t.complete(rid(1, client="idle"), "r", 0.0)
    t.start(rid(1, client="busy"), 0.0)
    t.gc(CLIENT_TTL_S + 1)
    assert t.num_clients() == 1
    assert t.peek("busy", 1).outcome is Outcome.IN_PROGRESS
    assert t.peek("idle", 1).outcome is Outcome.NEW  # forgotten with its watermark


def test_default_ttls_are_kudus() -> None:
    assert CLIENT_TTL_S == 3600.0 and RESPONSE_TTL_S == 600.0


def test_responses_per_client_are_bounded_and_the_dropped_are_stale() -> None:
    t = ResultTracker(max_responses_per_client=3)
    for s in range(1, 6):
        t.complete(rid(s, first=1), f"r{s}", 0.0)
    assert t.num_responses() == 3
    assert t.peek("c1", 2).outcome is Outcome.STALE
    assert [t.peek("c1", s).response for s in (3, 4, 5)] == ["r3", "r4", "r5"]


def test_in_progress_marks_do_not_count_against_the_response_bound() -> None:
    t = ResultTracker(max_responses_per_client=2)
    t.start(rid(1, first=1), 0.0)
    for s in range(2, 6):
        t.complete(rid(s, first=1), f"r{s}", 0.0)
    assert t.peek("c1", 1).outcome is Outcome.IN_PROGRESS
    assert t.num_responses() == 2


def test_a_write_in_progress_below_a_raised_watermark_still_gets_its_response() -> None:
    t = ResultTracker(response_ttl_s=10.0)
    t.start(rid(1, first=1), 0.0)
    t.complete(rid(2, first=1), "r2", 0.0)
    t.gc(11.0)  # r2 expired: the watermark passes 1, which is still being replicated
    t.complete(rid(1, first=1), "r1", 12.0)
    assert t.peek("c1", 1).response == "r1"


def test_clients_are_bounded_least_recently_seen_idle_one_goes_first() -> None:
    t = ResultTracker(max_clients=2)
    t.start(rid(1, client="a"), 0.0)  # in progress: kept
    t.complete(rid(1, client="b"), "b", 1.0)
    t.complete(rid(1, client="c"), "c", 2.0)
    assert t.num_clients() == 2
    assert t.peek("a", 1).outcome is Outcome.IN_PROGRESS
    assert t.peek("b", 1).outcome is Outcome.NEW
    assert t.peek("c", 1).response == "c"
    t.start(rid(2, client="c"), 3.0)  # c seen again: a is now the least recently seen
    t.complete(rid(1, client="d"), "d", 4.0)  # a and c both busy: the least recently seen goes anyway
    assert t.num_clients() == 2 and t.peek("a", 1).outcome is Outcome.NEW


# --- the request_id field ----------------------------------------------------------------------------------


def test_request_id_parses() -> None:
    assert parse_request_id(None) is None
    got = parse_request_id({"client_id": "abc", "seq_no": 4, "first_incomplete_seq_no": 2})
    assert got == RequestId("abc", 4, 2)
    from kudu_async.client.retry import WriteRequestIds

    assert parse_request_id(WriteRequestIds("abc").begin()) == RequestId("abc", 1, 1)  # the client's own form


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("abc:1", "'request_id' must be a map"),
        ({"client_id": "a", "seq_no": 1, "first_incomplete_seq_no": 1, "x": 1}, "unknown field"),
        ({"client_id": 5, "seq_no": 1, "first_incomplete_seq_no": 1}, "request_id.client_id"),
        ({"client_id": "", "seq_no": 1, "first_incomplete_seq_no": 1}, "request_id.client_id"),
        (
            {"client_id": "x" * (MAX_CLIENT_ID_LEN + 1), "seq_no": 1, "first_incomplete_seq_no": 1},
            "request_id.client_id",
        ),
        ({"client_id": "a\nb", "seq_no": 1, "first_incomplete_seq_no": 1}, "request_id.client_id"),
        ({"client_id": "é", "seq_no": 1, "first_incomplete_seq_no": 1}, "request_id.client_id"),
        ({"client_id": "a", "seq_no": -1, "first_incomplete_seq_no": 0}, "request_id.seq_no"),
        ({"client_id": "a", "seq_no": "1", "first_incomplete_seq_no": 0}, "request_id.seq_no"),
        ({"client_id": "a", "seq_no": True, "first_incomplete_seq_no": 0}, "request_id.seq_no"),
        ({"client_id": "a", "seq_no": 1}, "request_id.first_incomplete_seq_no"),
        ({"client_id": "a", "seq_no": 1, "first_incomplete_seq_no": -2}, "request_id.first_incomplete_seq_no"),
        ({"client_id": "a", "seq_no": 1, "first_incomplete_seq_no": 3}, "request_id.first_incomplete_seq_no"),
    ],
)
def test_malformed_request_ids_are_refused_naming_the_field(raw: Any, field: str) -> None:
    with pytest.raises(KuduInvalidArgument, match=field):
        parse_request_id(raw)

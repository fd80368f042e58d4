"""Exactly-once writes: what a tablet replica remembers of the Write requests it has seen.

A client names every Write RPC with a request id: its own random ``client_id``, a ``seq_no`` that all
retries of one RPC share (whatever the reason, whichever server they go to), and
``first_incomplete_seq_no``, the smallest seq_no the client still waits for. The id is replicated inside
the write's WAL entry, so every replica (leader, followers, a replica replaying its WAL at bootstrap)
records the write's result when it applies the entry. A retry, on the same leader or on the one elected
after a failover, is then answered with the first attempt's result instead of being applied again.

``ResultTracker`` is sans-IO, like the Raft core: a plain object with no event loop and no clock; callers
pass the time (``time.monotonic()`` seconds) in. A lookup answers:

- ``NEW``: never seen (or failed before it was replicated, which leaves no trace): the caller runs it,
  and the tracker marks it in progress.
- ``IN_PROGRESS``: an earlier attempt is being replicated: wait for its outcome, then ask again.
- ``COMPLETED``: applied; the response is the first attempt's.
- ``STALE``: below what this tracker has forgotten (the client said it was complete, or the response was
  dropped by age or by the per-client bound): the request can no longer be answered and must not be
  applied again, so it is refused with a clear error.

Memory is bounded (the constants below; Kudu keeps clients 1 h and responses 10 min): at most
``MAX_CLIENTS`` clients per tablet replica (the least recently seen idle one is forgotten first), at most
``MAX_RESPONSES_PER_CLIENT`` responses per client (the oldest go first), clients idle for
``CLIENT_TTL_S`` and responses older than ``RESPONSE_TTL_S`` are forgotten, and every request's
``first_incomplete_seq_no`` drops what its client no longer needs. Forgetting a response raises the
client's watermark past it, so a late retry of it is STALE, never applied twice. Forgetting a whole client
(idle TTL or the client bound) forgets its watermark too: a retry older than that is then treated as new,
as in Kudu.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduInvalidArgument

MAX_CLIENTS = 1024
MAX_RESPONSES_PER_CLIENT = 256
CLIENT_TTL_S = 3600.0
RESPONSE_TTL_S = 600.0
GC_INTERVAL_S = 10.0
MAX_CLIENT_ID_LEN = 64


class Outcome(enum.Enum):
    NEW = "NEW"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    STALE = "STALE"


@dataclass(frozen=True, slots=True)
class RequestId:
    """Who sent a Write and which one it is; ``first_incomplete_seq_no`` lets the server forget."""

    client_id: str
    seq_no: int
    first_incomplete_seq_no: int

    @property
    def key(self) -> tuple[str, int]:
        return self.client_id, self.seq_no


@dataclass(frozen=True, slots=True)
class Lookup:
    outcome: Outcome
    response: Any = None


def parse_request_id(raw: Any) -> RequestId | None:
    """A Write's ``request_id`` field, validated (absent: None, no tracking); errors name the field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise KuduInvalidArgument(
            f"'request_id' must be a map with client_id, seq_no and first_incomplete_seq_no, got {type(raw).__name__}"
        )
    unknown = set(raw) - {"client_id", "seq_no", "first_incomplete_seq_no"}
    if unknown:
        raise KuduInvalidArgument(f"'request_id' has unknown field(s) {sorted(map(str, unknown))}")
    cid = raw.get("client_id")
    if not isinstance(cid, str) or not 1 <= len(cid) <= MAX_CLIENT_ID_LEN or not cid.isascii() or not cid.isprintable():
        raise KuduInvalidArgument(
            f"'request_id.client_id' must be 1-{MAX_CLIENT_ID_LEN} printable ASCII characters, got {cid!r:.80}"
        )
    seq = raw.get("seq_no")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise KuduInvalidArgument(f"'request_id.seq_no' must be a non-negative integer, got {seq!r}")
    first = raw.get("first_incomplete_seq_no")
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise KuduInvalidArgument(f"'request_id.first_incomplete_seq_no' must be a non-negative integer, got {first!r}")
    if first > seq + 1:
        raise KuduInvalidArgument(
            f"'request_id.first_incomplete_seq_no' ({first}) must be at most seq_no + 1 ({seq + 1})"
        )
    return RequestId(cid, seq, first)


@dataclass(slots=True)
class _Entry:
    done: bool
    response: Any
    at: float  # when it was started or completed


@dataclass(slots=True)
class _Client:
    last_seen: float
    watermark: int = 0  # seq_nos below this and not in ``entries`` are forgotten
    entries: dict[int, _Entry] = field(default_factory=dict)


class ResultTracker:
    """Per tablet replica: the Write responses remembered per client, by seq_no."""

    def __init__(
        self,
        max_clients: int = MAX_CLIENTS,
        max_responses_per_client: int = MAX_RESPONSES_PER_CLIENT,
        client_ttl_s: float = CLIENT_TTL_S,
        response_ttl_s: float = RESPONSE_TTL_S,
        gc_interval_s: float = GC_INTERVAL_S,
    ) -> None:
        self.max_clients = max_clients
        self.max_responses_per_client = max_responses_per_client
        self.client_ttl_s = client_ttl_s
        self.response_ttl_s = response_ttl_s
        self.gc_interval_s = gc_interval_s
        self._clients: OrderedDict[str, _Client] = OrderedDict()  # least recently seen first
        self._last_gc: float | None = None
        self.duplicates_answered = 0
        self.stale_rejected = 0

    # --- the request path -----------------------------------------------------------------------------

    def start(self, rid: RequestId, now: float) -> Lookup:
        """Look a request up; a NEW one is marked in progress (``complete`` or ``abandon`` ends that)."""
        self.maybe_gc(now)
        c = self._touch(rid.client_id, now)
        self._forget_below(c, min(rid.first_incomplete_seq_no, rid.seq_no))
        table = c.entries
        e = table.get(rid.seq_no)
        if e is not None:
            if e.done:
                self.duplicates_answered += 1
                return Lookup(Outcome.COMPLETED, e.response)
            return Lookup(Outcome.IN_PROGRESS)
        if rid.seq_no < c.watermark:
            self.stale_rejected += 1
            return Lookup(Outcome.STALE)
        table[rid.seq_no] = _Entry(False, None, now)
        return Lookup(Outcome.NEW)

    def peek(self, client_id: str, seq_no: int) -> Lookup:
        """The state of a request without changing anything (no mark, no GC, no counters)."""
        c = self._clients.get(client_id)
        e = None if c is None else c.entries.get(seq_no)
        if e is not None:
            return Lookup(Outcome.COMPLETED, e.response) if e.done else Lookup(Outcome.IN_PROGRESS)
        if c is not None and seq_no < c.watermark:
            return Lookup(Outcome.STALE)
        return Lookup(Outcome.NEW)

    def complete(self, rid: RequestId, response: Any, now: float) -> None:
        """The write was applied (on any replica, in any role): remember its response. Idempotent: the
        first recorded response stays."""
        self.maybe_gc(now)
        c = self._touch(rid.client_id, now)
        self._forget_below(c, min(rid.first_incomplete_seq_no, rid.seq_no))
        table = c.entries
        e = table.get(rid.seq_no)
        if e is None and rid.seq_no < c.watermark:
            return  # the client already said it is done with this one
        if e is not None and e.done:
            return
        table[rid.seq_no] = _Entry(True, response, now)
        self._bound_responses(c)

    def abandon(self, client_id: str, seq_no: int) -> None:
        """An in-progress request failed before it was applied here: forget the mark (a completed
        response, recorded by an apply meanwhile, stays)."""
        c = self._clients.get(client_id)
        if c is None:
            return
        e = c.entries.get(seq_no)
        if e is not None and not e.done:
            del c.entries[seq_no]

    # --- forgetting -----------------------------------------------------------------------------------

    def maybe_gc(self, now: float) -> None:
        if self._last_gc is None:
            self._last_gc = now
        elif now - self._last_gc >= self.gc_interval_s:
            self.gc(now)

    def gc(self, now: float) -> None:
        """Forget idle clients and responses past their TTL."""
        self._last_gc = now
        for cid in list(self._clients):
            c = self._clients[cid]
            entries = c.entries
            if now - c.last_seen >= self.client_ttl_s and all(e.done for e in entries.values()):
                del self._clients[cid]
                continue
            old = [s for s, e in entries.items() if e.done and now - e.at >= self.response_ttl_s]
            for s in old:
                del entries[s]
            if old:
                c.watermark = max(c.watermark, max(old) + 1)

    def _touch(self, client_id: str, now: float) -> _Client:
        c = self._clients.get(client_id)
        if c is None:
            if len(self._clients) >= self.max_clients:
                self._evict_a_client()
            c = self._clients[client_id] = _Client(now)
        else:
            c.last_seen = max(c.last_seen, now)
            self._clients.move_to_end(client_id)
        return c

    def _evict_a_client(self) -> None:
        """Forget the least recently seen client with nothing in progress (or, if all have, the oldest)."""
        victim = next(
            (cid for cid, c in self._clients.items() if all(e.done for e in c.entries.values())),
            next(iter(self._clients)),
        )
        del self._clients[victim]

    @staticmethod
    def _forget_below(c: _Client, first_incomplete: int) -> None:
        if first_incomplete <= c.watermark:
            return
        c.watermark = first_incomplete
        if c.entries:
            for s in [s for s in c.entries if s < first_incomplete]:
                del c.entries[s]

    def _bound_responses(self, c: _Client) -> None:
        entries = c.entries
        if len(entries) <= self.max_responses_per_client:
            return
        done = sorted(s for s, e in entries.items() if e.done)
        extra = len(done) - self.max_responses_per_client
        if extra > 0:
            for s in done[:extra]:
                del entries[s]
            c.watermark = max(c.watermark, done[extra - 1] + 1)

    # --- introspection --------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        responses = self.num_responses()
        tracked = sum(len(c.entries) for c in self._clients.values())
        return {
            "clients": len(self._clients),
            "responses": responses,
            "in_progress": tracked - responses,
            "duplicates_answered": self.duplicates_answered,
            "stale_rejected": self.stale_rejected,
        }

    def num_clients(self) -> int:
        return len(self._clients)

    def num_responses(self) -> int:
        return sum(e.done for c in self._clients.values() for e in c.entries.values())

"""The client's part of retrying: request ids that make a retried write apply once.

Deadlines, backoff and which failures are retried are ``kudu_async.common.retry``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WriteRequestIds"]


class WriteRequestIds:
    """Request ids of one client's Write RPCs: ``client_id``, a ``seq_no`` per RPC (every retry of the RPC
    reuses it), and ``first_incomplete_seq_no``, the smallest seq_no still in flight (tablet servers forget
    the results of anything below it). Used from the client's event loop only."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._next = 1
        self._in_flight: dict[int, None] = {}  # insertion order is seq_no order: the first is the smallest

    def begin(self) -> dict[str, Any]:
        """The id of a new Write RPC; call ``end`` with it once the RPC will not be sent again."""
        seq = self._next
        self._next += 1
        self._in_flight[seq] = None
        return {"client_id": self.client_id, "seq_no": seq, "first_incomplete_seq_no": self.first_incomplete()}

    def end(self, request_id: dict[str, Any]) -> None:
        self._in_flight.pop(request_id["seq_no"], None)

    def first_incomplete(self) -> int:
        return next(iter(self._in_flight), self._next)

    def in_flight(self) -> int:
        return len(self._in_flight)

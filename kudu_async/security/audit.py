"""The audit log: one JSON line per authorization decision (every DDL decision, every denial).

A line is made on the event loop (a small dict to JSON) and handed to a bounded queue; a writer thread
appends it to the file through the standard library's rotating file handler, so the loop never waits on
the disk and the file never grows past ``max_bytes`` times ``backups + 1``. When the writer falls behind
by ``queue_size`` lines, new lines are dropped and counted (``dropped``), never blocking a call.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import time
from pathlib import Path
from typing import Any

from kudu_async.security.identity import Identity

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_BACKUPS = 4
DEFAULT_QUEUE_SIZE = 10_000

log = logging.getLogger(__name__)


def audit_line(
    *,
    identity: Identity,
    client: str,
    method: str,
    obj: str,
    allowed: bool,
    reason: str = "",
    now: float | None = None,
) -> dict[str, Any]:
    """The fields of one decision, in the order a reader expects them."""
    t = time.time() if now is None else now
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z",
        "user": identity.user,
        "authn": identity.authn,
        "client": client,
        "method": method,
        "object": obj,
        "allowed": allowed,
        "reason": reason,
    }


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """A queue handler that drops (and counts) a line when its bounded queue is full, never blocking."""

    def __init__(self, q: queue.Queue[Any]) -> None:
        super().__init__(q)
        self.dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        # The message is already the JSON line: skip the formatting and copying QueueHandler does.
        return record


class AuditLog:
    """Appends audit lines to ``path`` off the event loop; ``close`` flushes and stops the writer."""

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        backups: int = DEFAULT_BACKUPS,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        if max_bytes <= 0 or backups < 0 or queue_size <= 0:
            raise ValueError("audit log: max_bytes and queue_size must be positive, backups >= 0")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups)
        self._file.setFormatter(logging.Formatter("%(message)s"))
        q: queue.Queue[Any] = queue.Queue(queue_size)
        self._handler = _DroppingQueueHandler(q)
        self._listener = logging.handlers.QueueListener(q, self._file)
        self._listener.start()
        self._closed = False

    @property
    def dropped(self) -> int:
        return self._handler.dropped

    def record(self, line: dict[str, Any]) -> None:
        """Queue one decision (see ``audit_line``) for the writer."""
        if self._closed:
            return
        rec = logging.LogRecord("kudu_async.audit", logging.INFO, "", 0, json.dumps(line), None, None)
        self._handler.handle(rec)

    def close(self) -> None:
        """Write what is queued and stop the writer (blocks until it has: call off the loop or at exit)."""
        if self._closed:
            return
        self._closed = True
        self._listener.stop()
        self._file.close()
        if self.dropped:
            log.warning("audit log %s dropped %d lines: its writer fell behind", self.path, self.dropped)

"""Row locks: ops touching the same primary key serialise from prepare until apply/abort.

An op takes all its keys at once (all-or-nothing, so two ops can never deadlock). Callers on threads
may block with a timeout; the asyncio tserver passes ``timeout_s=0`` and retries, never blocking the loop.

Locks are held per op, as one dict of its keys: taking them checks the op's keys against each other op
in flight (iterating the smaller side, in C) and releasing them all drops one dict. A bulk write takes
and frees its 100k row locks with one pass over its keys instead of five (a key -> owner table costs an
insert, a check and a delete per key on top of building the op's own set), and there are only a few
ops in flight per tablet (one per write RPC being prepared or replicated).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from kudu_async.common.errors import KuduTimedOut


class LockManager:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: dict[int, dict[bytes, None]] = {}  # owner -> the keys it holds
        self._waiting = 0

    def acquire(self, keys: Iterable[bytes], owner: int, timeout_s: float) -> None:
        """Take every key for ``owner`` (keys it already holds count as free), or none of them.

        A dict passed as ``keys`` becomes the op's key set as it is (no copy): do not change it after."""
        mine = keys if type(keys) is dict else dict.fromkeys(keys)
        wanted = mine.keys()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                held = self._held
                if all(other.keys().isdisjoint(wanted) for o, other in held.items() if o != owner):
                    current = held.get(owner)
                    if current is None:
                        held[owner] = mine
                    else:
                        current.update(mine)
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KuduTimedOut("timed out waiting for row locks held by another operation")
                self._waiting += 1
                try:
                    self._cond.wait(remaining)
                finally:
                    self._waiting -= 1

    def release_all(self, owner: int) -> None:
        """Free every key ``owner`` holds (what a finished op does): no pass over its keys."""
        with self._cond:
            if self._held.pop(owner, None) is not None and self._waiting:
                self._cond.notify_all()

    def release(self, keys: Iterable[bytes], owner: int) -> None:
        """Free those of ``keys`` that ``owner`` holds; others' locks are untouched."""
        with self._cond:
            current = self._held.get(owner)
            if current is None:
                return
            for k in keys:
                current.pop(k, None)
            if not current:
                del self._held[owner]
            if self._waiting:
                self._cond.notify_all()

    def num_locked(self) -> int:
        with self._cond:
            return sum(map(len, self._held.values()))

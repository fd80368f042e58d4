"""Row locks: ops touching the same primary key serialise from prepare until apply/abort.

An op takes all its keys at once (all-or-nothing, so two ops can never deadlock). Callers on threads
may block with a timeout; the asyncio tserver passes ``timeout_s=0`` and retries, never blocking the loop.
"""

from __future__ import annotations

import itertools
import operator
import threading
import time
from collections import deque
from collections.abc import Iterable

from kudu_async.common.errors import KuduTimedOut


class LockManager:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._owners: dict[bytes, int] = {}
        self._waiting = 0

    def acquire(self, keys: Iterable[bytes], owner: int, timeout_s: float) -> None:
        keys = list(keys)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                owners = self._owners
                if owners.keys().isdisjoint(keys) or not any(owners.get(k, owner) != owner for k in keys):
                    owners.update(dict.fromkeys(keys, owner))
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KuduTimedOut("timed out waiting for row locks held by another operation")
                self._waiting += 1
                try:
                    self._cond.wait(remaining)
                finally:
                    self._waiting -= 1

    def release(self, keys: Iterable[bytes], owner: int) -> None:
        keys = keys if isinstance(keys, list) else list(keys)
        with self._cond:
            owners = self._owners
            if all(map(operator.eq, map(owners.get, keys), itertools.repeat(owner))):
                deque(map(owners.__delitem__, keys), maxlen=0)  # all ours (the usual case): C-level
            else:
                for k in keys:
                    if owners.get(k) == owner:
                        del owners[k]
            if self._waiting:
                self._cond.notify_all()

    def num_locked(self) -> int:
        with self._cond:
            return len(self._owners)

"""Polling waits for tests and scripts that drive a MiniCluster from plain (blocking) code."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kudu_async.common.errors import KuduBadStatus

T = TypeVar("T")

# What a node answers while it starts, elects a leader or changes its members: an error status, a refused
# connection, a status page not yet JSON or not yet carrying the key asked for. A wait that spans such a
# change passes these as ``retry_on`` and asks again.
NOT_READY: tuple[type[Exception], ...] = (KuduBadStatus, OSError, ValueError, KeyError)


def wait_for(
    pred: Callable[[], T | None],
    timeout_s: float,
    what: str,
    every_s: float = 0.1,
    retry_on: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``pred`` until it returns something truthy and return that; AssertionError naming ``what`` and
    the last answer once ``timeout_s`` has passed (the cluster may take a few heartbeats to show a change).
    An exception of ``retry_on`` counts as a falsy answer; any other ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        last: object
        try:
            got = pred()
        except retry_on as e:
            last = e
        else:
            if got:
                return got
            last = got
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what} (last: {last!r})"
        time.sleep(every_s)

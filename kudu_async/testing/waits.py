"""Polling waits for tests and scripts that drive a MiniCluster from plain (blocking) code."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(pred: Callable[[], T | None], timeout_s: float, what: str, every_s: float = 0.1) -> T:
    """Call ``pred`` until it returns something truthy and return that; AssertionError naming ``what``
    once ``timeout_s`` has passed (the cluster may take a few heartbeats to show a change)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(every_s)

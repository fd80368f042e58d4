"""The tserver's batched hand-off of point reads to its workers."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from kudu_async.common.errors import KuduServiceUnavailable
from kudu_async.tserver import scanners
from kudu_async.tserver.scanners import BatchedHandOff, ScannerManager


async def test_jobs_of_one_loop_iteration_share_one_worker_call_and_keep_their_own_outcomes() -> None:
    with ThreadPoolExecutor(2) as ex:
        h = BatchedHandOff(ex, max_batch=3)
        threads: list[int] = []

        def job(i: int) -> int:
            threads.append(threading.get_ident())
            if i == 2:
                raise ValueError("bad row")
            return i * 10

        futs = [h.run(lambda i=i: job(i)) for i in range(5)]  # type: ignore[misc]
        done = await asyncio.gather(*futs, return_exceptions=True)
        assert done[:2] == [0, 10] and done[3:] == [30, 40]
        assert isinstance(done[2], ValueError)  # only its own caller sees a job's error
        assert (h.calls, h.jobs) == (2, 5)  # five jobs in calls of at most three
        assert threading.get_ident() not in threads  # never on the loop's thread

        assert await h.run(lambda: 7) == 7  # a later iteration: a call of its own
        assert h.calls == 3


async def test_a_caller_that_gave_up_does_not_disturb_the_others() -> None:
    with ThreadPoolExecutor(1) as ex:
        h = BatchedHandOff(ex)
        gate = threading.Event()
        slow = h.run(lambda: gate.wait(5))
        other = h.run(lambda: "ok")
        slow.cancel()  # its deadline passed
        gate.set()
        assert await other == "ok"


async def test_a_stopped_executor_fails_the_reads_with_a_clear_error() -> None:
    ex = ThreadPoolExecutor(1)
    ex.shutdown()
    h = BatchedHandOff(ex)
    with pytest.raises(KuduServiceUnavailable, match="cannot run a read"):
        await h.run(lambda: 1)


def test_scanner_ids_are_unique_and_name_this_process() -> None:
    """Ids are a per-process random prefix plus a counter (no random bytes per scan): all distinct, and
    none can name a scanner of another incarnation of the server."""
    ids = {ScannerManager.new("t", iter(()), None, None).id for _ in range(10_000)}  # type: ignore[arg-type]
    assert len(ids) == 10_000
    assert all(i.startswith(scanners._ID_PREFIX) and len(i) >= 24 for i in ids)

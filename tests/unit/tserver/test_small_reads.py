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


class _Batches:
    """A TabletScanner stand-in over fixed batches, counting how many were read."""

    def __init__(self, n: int) -> None:
        import pyarrow as pa

        self.batches = [pa.record_batch([pa.array([i] * 10)], names=["x"]) for i in range(n)]
        self.read = 0
        self.last_key: bytes | None = None

    def __iter__(self) -> _Batches:
        return self

    def __next__(self) -> object:
        if self.read >= len(self.batches):
            raise StopIteration
        self.read += 1
        return self.batches[self.read - 1]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
async def test_a_scanner_reads_ahead_between_calls_and_returns_every_batch_once_in_order(n: int) -> None:
    import pyarrow as pa

    from kudu_async.common.row_conversion import ipc_to_table

    with ThreadPoolExecutor(2) as ex:
        mgr = ScannerManager(ex)
        src = _Batches(n)
        sc = ScannerManager.new("t", src, pa.schema([("x", pa.int64())]), None)  # type: ignore[arg-type]
        reply = mgr.started(sc, await asyncio.get_running_loop().run_in_executor(ex, ScannerManager.pull, sc))
        got = [ipc_to_table(reply["data"]).column("x").to_pylist()]
        while reply["has_more"]:
            if sc.prefetch is not None:  # the batch after the look-ahead is read before the next call
                await asyncio.wait([sc.prefetch])
                assert len(sc.ahead) == min(2, n - len(got)) and src.read == len(got) + len(sc.ahead)
                assert mgr.buffered_bytes() == sum(b.nbytes for b in sc.ahead)
            reply = await mgr.next_batch(mgr.get(reply["scanner_id"]))
            got.append(ipc_to_table(reply["data"]).column("x").to_pylist())
        assert got == [[i] * 10 for i in range(n)]
        assert reply["scanner_id"] is None and mgr.scanners == {} and mgr.buffered_bytes() == 0

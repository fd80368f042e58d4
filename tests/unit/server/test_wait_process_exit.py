"""``--exit-with-parent-pid``'s wait: any process (not only the node's parent) is watched until it exits."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import uvloop

from kudu_async.server.node import wait_process_exit


def test_the_wait_ends_when_a_process_that_is_not_a_parent_exits() -> None:
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    async def go() -> None:
        waiting = asyncio.create_task(wait_process_exit(sibling.pid))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the process still runs
        sibling.terminate()
        await asyncio.wait_for(waiting, 10.0)  # on uvloop, as a node runs it

    try:
        uvloop.run(go())
    finally:
        sibling.kill()
        sibling.wait()
    uvloop.run(asyncio.wait_for(wait_process_exit(sibling.pid), 5.0))  # already gone: returns at once

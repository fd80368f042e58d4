"""The event-loop lag probe: a stall of the loop shows in its windowed p99/max gauges."""

from __future__ import annotations

import asyncio
import time

import pytest

from kudu_async.common.metrics import MetricRegistry
from kudu_async.server.loop_lag import LoopLagProbe


def test_window_is_bounded_and_forgets_old_samples() -> None:
    probe = LoopLagProbe(interval_s=0.001, window_s=0.1)
    for i in range(10_000):  # far more samples than the ring holds
        probe.record(1.0, 100.0 + i * 0.001)
    assert len(probe._lag_ms) <= 200
    assert len(probe.window(now=109.999)) == 101  # the last 0.1 s of samples
    probe.record(50.0, 110.0)
    assert float(probe.window(now=110.0).max()) == 50.0
    assert len(probe.window(now=200.0)) == 0
    with pytest.raises(ValueError, match="interval_s"):
        LoopLagProbe(interval_s=0)


def test_a_blocked_loop_shows_in_the_gauges() -> None:
    registry = MetricRegistry()
    entity = registry.entity("server", "kudu.tabletserver")
    probe = LoopLagProbe(interval_s=0.001, window_s=5.0)
    probe.register(entity)

    async def main() -> None:
        probe.start()
        await asyncio.sleep(0.05)
        time.sleep(0.03)  # noqa: ASYNC251 -- the stall under test: the loop blocked for 30 ms
        await asyncio.sleep(0.05)
        await probe.stop()

    asyncio.run(main())
    values = {m["name"]: m["value"] for m in registry.to_json()[0]["metrics"]}
    assert values["event_loop_lag_ms_max"] >= 25.0
    assert 0.0 <= values["event_loop_lag_ms_p99"] <= values["event_loop_lag_ms_max"]

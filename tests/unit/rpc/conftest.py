"""Fixtures for the RPC tests: a real server on 127.0.0.1:0 with the test service, and a client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kudu_async.common.metrics import MetricEntity
from kudu_async.rpc import FaultInjector, RpcClient, RpcServer
from tests.unit.rpc.rpc_testkit import TestService, serve_object


@pytest.fixture
def metrics() -> MetricEntity:
    return MetricEntity("server", "test-server")


@pytest.fixture
def service() -> TestService:
    return TestService()


@pytest.fixture
def faults() -> FaultInjector:
    return FaultInjector(enabled=True, seed=1)


@pytest.fixture
async def server(metrics: MetricEntity, service: TestService, faults: FaultInjector) -> AsyncIterator[RpcServer]:
    srv = RpcServer(metrics, node_name="ts-1", faults=faults, max_body_bytes=16 * 1024 * 1024)
    serve_object(srv, "Test", service)
    await srv.start("127.0.0.1", 0)
    yield srv
    service.gate.set()
    await srv.stop(1.0)


@pytest.fixture
async def client(faults: FaultInjector) -> AsyncIterator[RpcClient]:
    c = RpcClient("client-1", faults=faults)
    yield c
    await c.close()

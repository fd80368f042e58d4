"""The client's authn token: when it is fetched and renewed, and the one retry after a 'token expired'
answer, against a real RPC server standing in for the leader master and a tablet server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kudu_async.client.authn import RENEW_AT, AuthnRpcClient, ClientCredentials, TokenDecision
from kudu_async.common.errors import KuduNotAuthorized
from kudu_async.rpc import RpcServer
from kudu_async.rpc.server import CallContext
from kudu_async.security.authn import kudu_token_header

JWT = "aaa.bbb.ccc"


class FakeCluster:
    """ConnectToMaster hands out token-1, token-2, ...; Data/Get answers who called, or 'expired' on demand."""

    def __init__(self, validity_s: float = 100.0) -> None:
        self.validity_s = validity_s
        self.issued = 0
        self.expired: set[bytes] = set()
        self.seen: list[bytes | None] = []
        self.server = RpcServer(None)
        self.server.register("Master", "ConnectToMaster", self.connect, requires="any")
        self.server.register("Data", "Get", self.get, requires="user")

    async def connect(self, req: Any, ctx: CallContext) -> dict[str, Any]:
        assert ctx.identity.user == "bob"
        self.issued += 1
        return {
            "leader": True,
            "authn_token": f"token-{self.issued}".encode(),
            "authn_token_expire_unix": time.time() + self.validity_s,
        }

    async def get(self, req: Any, ctx: CallContext) -> str:
        return "ok"


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    c = FakeCluster()

    class Auth:
        def authenticate(self, credentials: bytes | None, claimed_user: str, peer: Any) -> Any:
            from kudu_async.security.identity import Identity

            c.seen.append(credentials)
            if credentials in {kudu_token_header(t) for t in c.expired}:
                raise KuduNotAuthorized("authn token expired")
            return Identity(claimed_user, "token")

    c.server.authenticator = Auth()
    await c.server.start("127.0.0.1", 0)
    yield c
    await c.server.stop(1.0)


def test_renewal_decisions() -> None:
    d = TokenDecision()
    assert d.needs_renewal(0.0) and not d.usable(0.0)  # no token yet
    d.got(1000.0, 1100.0)
    assert not d.needs_renewal(1000.0 + 100 * RENEW_AT - 1) and d.needs_renewal(1000.0 + 100 * RENEW_AT)
    assert d.usable(1099.0) and not d.usable(1100.0)
    d.expired()
    assert d.needs_renewal(1000.0)


async def test_the_token_is_fetched_with_the_jwt_then_shown_and_renewed_once_when_expired(
    cluster: FakeCluster,
) -> None:
    rpc = AuthnRpcClient("client")
    creds = ClientCredentials(rpc, [cluster.server.address], user="bob", jwt=JWT)
    rpc.credentials = creds
    try:
        assert await rpc.call(cluster.server.address, "Data", "Get", {}) == "ok"
        # The JWT went only to ConnectToMaster; the call showed the token.
        assert cluster.seen == [b"Bearer " + JWT.encode(), kudu_token_header(b"token-1")]
        assert await rpc.call(cluster.server.address, "Data", "Get", {}) == "ok"
        assert cluster.issued == 1  # not renewed while it is fresh
        cluster.expired.add(b"token-1")
        assert await rpc.call(cluster.server.address, "Data", "Get", {}) == "ok"  # renewed, retried once
        assert cluster.issued == 2 and cluster.seen[-1] == kudu_token_header(b"token-2")
        # A token refused again right after renewal is the caller's error, not a loop.
        cluster.expired.add(b"token-2")
        cluster.expired.add(b"token-3")
        with pytest.raises(KuduNotAuthorized, match="expired"):
            await rpc.call(cluster.server.address, "Data", "Get", {})
        assert cluster.issued == 3
    finally:
        await creds.close()
        await rpc.close()


async def test_a_token_is_renewed_ahead_of_its_expiry_without_holding_calls(cluster: FakeCluster) -> None:
    cluster.validity_s = 2.0
    rpc = AuthnRpcClient("client")
    creds = ClientCredentials(rpc, [cluster.server.address], user="bob", jwt=JWT)
    rpc.credentials = creds
    try:
        await rpc.call(cluster.server.address, "Data", "Get", {})
        cluster.validity_s = 100.0
        await asyncio.sleep(1.65)  # past RENEW_AT of its life, still valid
        await rpc.call(cluster.server.address, "Data", "Get", {})  # served with token-1; renewal in the background
        assert cluster.seen.count(kudu_token_header(b"token-1")) == 2
        assert creds._renewal is not None
        await creds._renewal
        assert creds.token == b"token-2" and cluster.issued == 2
    finally:
        await creds.close()
        await rpc.close()


def test_without_credentials_the_os_user_is_named() -> None:
    from kudu_async.client.authn import os_user

    class Rpc:
        node_name = "c"
        max_response_bytes = 1

        def set_credentials(self, user: str | None, authorization: bytes | None) -> None:
            self.got = (user, authorization)

    rpc = Rpc()
    ClientCredentials(rpc, ["h:1"])  # type: ignore[arg-type]
    assert rpc.got == (os_user(), None)
    with pytest.raises(KuduNotAuthorized, match="require_authentication"):
        ClientCredentials(rpc, ["h:1"], require_authentication=True)  # type: ignore[arg-type]

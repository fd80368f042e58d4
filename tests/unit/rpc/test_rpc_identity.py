"""The call's identity: the name an unauthenticated caller gives, or what the server's authenticator says."""

from __future__ import annotations

import pytest

from kudu_async.common.errors import KuduNotAuthorized
from kudu_async.rpc import RpcClient, RpcServer
from kudu_async.security.identity import Identity, TlsPeer


class _Tokens:
    """Accepts one bearer credential; refuses the rest, as an authenticator must."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes | None, str, TlsPeer | None]] = []

    def authenticate(self, credentials: bytes | None, claimed_user: str, peer: TlsPeer | None) -> Identity:
        self.seen.append((credentials, claimed_user, peer))
        if credentials == b"Bearer good":
            return Identity("alice", "jwt")
        raise KuduNotAuthorized(f"bad credentials for {claimed_user or 'nobody'}")


async def test_without_an_authenticator_the_given_name_is_unauthenticated(server: RpcServer, client: RpcClient) -> None:
    ctx = await client.call(server.address, "Test", "Context", None, timeout_s=5.0)
    assert (ctx["user"], ctx["authn"]) == ("", "none")
    client.set_credentials("bob", None)
    ctx = await client.call(server.address, "Test", "Context", None, timeout_s=5.0)
    assert (ctx["user"], ctx["authn"]) == ("bob", "none")
    assert ctx["source"] == "client-1"


async def test_the_authenticator_decides_and_its_refusal_reaches_the_caller(
    server: RpcServer, client: RpcClient
) -> None:
    auth = _Tokens()
    server.authenticator = auth
    client.set_credentials("bob", b"Bearer good")
    ctx = await client.call(server.address, "Test", "Context", None, timeout_s=5.0)
    assert (ctx["user"], ctx["authn"]) == ("alice", "jwt")
    client.set_credentials("bob", b"Bearer forged")
    with pytest.raises(KuduNotAuthorized, match="bad credentials for bob"):
        await client.call(server.address, "Test", "Context", None, timeout_s=5.0)
    assert auth.seen[-1] == (b"Bearer forged", "bob", None)
    # The server keeps serving after a refusal.
    client.set_credentials(None, b"Bearer good")
    assert (await client.call(server.address, "Test", "Ping", None, timeout_s=5.0)) is not None

"""RPC over TLS: one port for TLS and cleartext, TLS-only servers, client policies, mutual TLS, on both loops."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import pytest

from kudu_async.common.errors import KuduNetworkError
from kudu_async.rpc import CallContext, RpcClient, RpcServer
from kudu_async.security import ca, tls
from kudu_async.security.identity import Identity, TlsPeer

NOW = time.time()
AUTHORITY = ca.CertAuthority.create(NOW)


def _signed(authority: ca.CertAuthority, cn: str = "kudu") -> ca.CertKey:
    key = ca.key_to_pem(ca.generate_key())
    return ca.CertKey(authority.sign(ca.make_csr(key, cn, []), cn, ["127.0.0.1"], NOW, 3600), key)


class _Peers:
    """Records the TLS side of each call (what an authenticator is given)."""

    def __init__(self) -> None:
        self.peers: list[TlsPeer | None] = []

    def authenticate(self, credentials: bytes | None, claimed_user: str, peer: TlsPeer | None) -> Identity:
        self.peers.append(peer)
        return Identity(claimed_user, "none")


class _Pair(NamedTuple):
    server: RpcServer
    client: RpcClient
    peers: _Peers


@contextlib.asynccontextmanager
async def _serving(
    mode: str,
    policy: str | None,
    *,
    server_own: ca.CertKey | None = None,
    server_trust: bytes | None = None,
    client_trust: bytes | None = None,
    client_own: ca.CertKey | None = None,
) -> AsyncIterator[_Pair]:
    """A server with TLS ``mode`` ("none", "optional", "required") serving Test/Echo, and a client with
    encryption ``policy`` (None: cleartext only); both closed on the way out. The server's certificate is
    ``server_own`` (default: self-signed), checked against ``client_trust`` (None: not checked); the server
    asks for client certificates when it has ``server_trust``."""
    server = RpcServer()

    async def echo(req: Any, ctx: CallContext) -> Any:
        return req

    server.register("Test", "Echo", echo, requires="any")
    own = server_own or ca.self_signed("kudu", ["127.0.0.1"], NOW)
    server.tls = None if mode == "none" else tls.ServerTls(mode, tls.server_context(own, server_trust))
    peers = _Peers()
    server.authenticator = peers
    await server.start()
    client_tls = None if policy is None else tls.ClientTls(policy, tls.client_context(client_trust, client_own))
    client = RpcClient("t", tls=client_tls)
    try:
        yield _Pair(server, client, peers)
    finally:
        await client.close()
        await server.stop(1.0)


async def test_a_required_server_serves_tls_and_tells_an_optional_loopback_client_to_use_it() -> None:
    async with _serving("required", tls.POLICY_OPTIONAL) as (server, client, peers):
        # The optional client tries cleartext on loopback, gets GOAWAY(INADEQUATE_SECURITY), goes again over TLS.
        assert await client.call(server.address, "Test", "Echo", "hello", timeout_s=5.0) == "hello"
        assert peers.peers == [TlsPeer()]  # encrypted, no client certificate
        many = await asyncio.gather(*(client.call(server.address, "Test", "Echo", i) for i in range(50)))
        assert many == list(range(50))


async def test_an_optional_client_reaches_an_optional_server_in_cleartext_on_loopback() -> None:
    async with _serving("optional", tls.POLICY_OPTIONAL) as (server, client, peers):
        for _ in range(3):  # new connections each time: the server's first frames may be read at once
            assert await client.call(server.address, "Test", "Echo", "x", timeout_s=5.0) == "x"
            for conn in list(client._all):
                conn.close_connection()
            await asyncio.sleep(0.01)
        assert peers.peers == [None, None, None]  # cleartext, as Kudu's optional on loopback


async def test_a_cleartext_client_is_refused_by_a_required_server_with_a_clear_error() -> None:
    async with _serving("required", None) as (server, client, peers):
        with pytest.raises(KuduNetworkError, match="accepts only TLS connections"):
            await client.call(server.address, "Test", "Echo", "x", timeout_s=5.0)
        assert peers.peers == []  # no handler ran


async def test_an_optional_server_serves_both_on_one_port() -> None:
    async with _serving("optional", tls.POLICY_REQUIRED) as (server, client, peers):
        clear = RpcClient("clear")
        try:
            assert await clear.call(server.address, "Test", "Echo", 1) == 1
        finally:
            await clear.close()
        assert await client.call(server.address, "Test", "Echo", 2) == 2
        assert peers.peers == [None, TlsPeer()]


async def test_a_client_requiring_tls_refuses_a_server_without_it() -> None:
    async with _serving("none", tls.POLICY_REQUIRED) as (server, client, _):
        with pytest.raises(KuduNetworkError, match="does not offer TLS"):
            await client.call(server.address, "Test", "Echo", 1, timeout_s=5.0)


async def test_mutual_tls_names_the_peer_and_another_cas_certificate_is_refused() -> None:
    trusted = AUTHORITY.cert_pem
    async with _serving(
        "required",
        tls.POLICY_REQUIRED,
        server_own=_signed(AUTHORITY),
        server_trust=trusted,
        client_trust=trusted,
        client_own=_signed(AUTHORITY),
    ) as (server, client, peers):
        assert await client.call(server.address, "Test", "Echo", 1) == 1
        peer = peers.peers[-1]
        assert peer is not None and peer.subject_cn == "kudu" and peer.cert_der

    intruder = ca.CertAuthority.create(NOW)
    refusals: list[tuple[ca.CertKey, bytes | None, ca.CertKey | None]] = [
        (_signed(AUTHORITY), trusted, _signed(intruder)),  # a client certificate from another CA: the server refuses it
        (_signed(intruder), None, None),  # a server certificate from another CA: the client refuses it
    ]
    for server_own, server_trust, client_own in refusals:
        async with _serving(
            "required",
            tls.POLICY_REQUIRED,
            server_own=server_own,
            server_trust=server_trust,
            client_trust=trusted,
            client_own=client_own,
        ) as (server, client, peers):
            with pytest.raises(KuduNetworkError, match=r"TLS connection to .* failed|connection to .* lost"):
                await client.call(server.address, "Test", "Echo", 1, timeout_s=5.0)
            assert peers.peers == []


async def test_what_a_tls_client_receives_holds_no_cleartext() -> None:
    """A proxy between client and server sees only ciphertext in both directions."""
    seen = bytearray()
    async with _serving("required", tls.POLICY_REQUIRED) as (server, client, _):

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", server.port)

            async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                while data := await r.read(65536):
                    seen.extend(data)
                    w.write(data)
                w.close()

            await asyncio.gather(pump(reader, up_w), pump(up_r, writer), return_exceptions=True)

        proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
        port = proxy.sockets[0].getsockname()[1]
        secret = "row-data-" + "x" * 64
        try:
            assert await client.call(f"127.0.0.1:{port}", "Test", "Echo", secret) == secret
        finally:
            proxy.close()
    assert len(seen) > 200 and b"row-data-" not in seen and b"Echo" not in seen


async def test_a_silent_connection_does_not_hold_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from kudu_async.rpc import server as server_mod

    monkeypatch.setattr(server_mod, "HANDSHAKE_TIMEOUT_S", 0.2)
    async with _serving("optional", None) as (server, client, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(10), 2.0) == b""  # closed by the server after the timeout
        writer.close()
        assert await client.call(server.address, "Test", "Echo", 3) == 3


@pytest.mark.timeout(60)
def test_tls_on_uvloop() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        await test_an_optional_client_reaches_an_optional_server_in_cleartext_on_loopback()
        await test_a_required_server_serves_tls_and_tells_an_optional_loopback_client_to_use_it()
        await test_mutual_tls_names_the_peer_and_another_cas_certificate_is_refused()
        await test_a_cleartext_client_is_refused_by_a_required_server_with_a_clear_error()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())

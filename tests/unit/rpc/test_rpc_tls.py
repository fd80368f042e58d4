"""RPC over TLS: one port for TLS and cleartext, TLS-only servers, client policies, mutual TLS, on both loops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

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


async def _server(mode: str, own: ca.CertKey | None = None, trusted: bytes | None = None) -> tuple[RpcServer, _Peers]:
    server = RpcServer()

    async def echo(req: Any, ctx: CallContext) -> Any:
        return req

    server.register("Test", "Echo", echo, requires="any")
    own = own or ca.self_signed("kudu", ["127.0.0.1"], NOW)
    server.tls = None if mode == "none" else tls.ServerTls(mode, tls.server_context(own, trusted))
    peers = _Peers()
    server.authenticator = peers
    await server.start()
    return server, peers


async def _with(
    mode: str,
    policy: str | None,
    body: Callable[[RpcServer, RpcClient, _Peers], Awaitable[None]],
    *,
    server_own: ca.CertKey | None = None,
    server_trust: bytes | None = None,
    client_trust: bytes | None = None,
    client_own: ca.CertKey | None = None,
) -> None:
    server, peers = await _server(mode, server_own, server_trust)
    client_tls = None if policy is None else tls.ClientTls(policy, tls.client_context(client_trust, client_own))
    client = RpcClient("t", tls=client_tls)
    try:
        await body(server, client, peers)
    finally:
        await client.close()
        await server.stop(1.0)


async def test_a_required_server_serves_tls_and_tells_an_optional_loopback_client_to_use_it() -> None:
    async def body(server: RpcServer, client: RpcClient, peers: _Peers) -> None:
        # The optional client tries cleartext on loopback, gets GOAWAY(INADEQUATE_SECURITY), goes again over TLS.
        assert await client.call(server.address, "Test", "Echo", "hello", timeout_s=5.0) == "hello"
        assert peers.peers == [TlsPeer()]  # encrypted, no client certificate
        many = await asyncio.gather(*(client.call(server.address, "Test", "Echo", i) for i in range(50)))
        assert many == list(range(50))

    await _with("required", tls.POLICY_OPTIONAL, body)


async def test_an_optional_client_reaches_an_optional_server_in_cleartext_on_loopback() -> None:
    async def body(server: RpcServer, client: RpcClient, peers: _Peers) -> None:
        for _ in range(3):  # new connections each time: the server's first frames may be read at once
            assert await client.call(server.address, "Test", "Echo", "x", timeout_s=5.0) == "x"
            for conn in list(client._all):
                conn.close_connection()
            await asyncio.sleep(0.01)
        assert peers.peers == [None, None, None]  # cleartext, as Kudu's optional on loopback

    await _with("optional", tls.POLICY_OPTIONAL, body)


async def test_a_cleartext_client_is_refused_by_a_required_server_with_a_clear_error() -> None:
    async def body(server: RpcServer, client: RpcClient, peers: _Peers) -> None:
        with pytest.raises(KuduNetworkError, match="accepts only TLS connections"):
            await client.call(server.address, "Test", "Echo", "x", timeout_s=5.0)
        assert peers.peers == []  # no handler ran

    await _with("required", None, body)


async def test_an_optional_server_serves_both_on_one_port() -> None:
    async def body(server: RpcServer, client: RpcClient, peers: _Peers) -> None:
        clear = RpcClient("clear")
        try:
            assert await clear.call(server.address, "Test", "Echo", 1) == 1
        finally:
            await clear.close()
        assert await client.call(server.address, "Test", "Echo", 2) == 2
        assert peers.peers == [None, TlsPeer()]

    await _with("optional", tls.POLICY_REQUIRED, body)


async def test_a_client_requiring_tls_refuses_a_server_without_it() -> None:
    async def body(server: RpcServer, client: RpcClient, peers: _Peers) -> None:
        with pytest.raises(KuduNetworkError, match="does not offer TLS"):
            await client.call(server.address, "Test", "Echo", 1, timeout_s=5.0)

    await _with("none", tls.POLICY_REQUIRED, body)


async def test_mutual_tls_names_the_peer_and_another_cas_certificate_is_refused() -> None:
    trusted = AUTHORITY.cert_pem

    async def body(server: RpcServer, client: RpcClient, peers: _Peers) -> None:
        assert await client.call(server.address, "Test", "Echo", 1) == 1
        peer = peers.peers[-1]
        assert peer is not None and peer.subject_cn == "kudu" and peer.cert_der

    await _with(
        "required",
        tls.POLICY_REQUIRED,
        body,
        server_own=_signed(AUTHORITY),
        server_trust=trusted,
        client_trust=trusted,
        client_own=_signed(AUTHORITY),
    )

    async def refused(server: RpcServer, client: RpcClient, peers: _Peers) -> None:
        with pytest.raises(KuduNetworkError, match=r"TLS connection to .* failed|connection to .* lost"):
            await client.call(server.address, "Test", "Echo", 1, timeout_s=5.0)
        assert peers.peers == []

    intruder = ca.CertAuthority.create(NOW)
    # A client certificate from another CA: the server's handshake refuses it.
    await _with(
        "required",
        tls.POLICY_REQUIRED,
        refused,
        server_own=_signed(AUTHORITY),
        server_trust=trusted,
        client_trust=trusted,
        client_own=_signed(intruder),
    )
    # A server certificate from another CA: the client refuses it.
    await _with(
        "required", tls.POLICY_REQUIRED, refused, server_own=_signed(intruder), server_trust=None, client_trust=trusted
    )


async def test_what_a_tls_client_receives_holds_no_cleartext() -> None:
    """A proxy between client and server sees only ciphertext in both directions."""
    server, _ = await _server("required")
    seen = bytearray()

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
    client = RpcClient("t", tls=tls.ClientTls(tls.POLICY_REQUIRED, tls.client_context(None)))
    secret = "row-data-" + "x" * 64
    try:
        assert await client.call(f"127.0.0.1:{port}", "Test", "Echo", secret) == secret
    finally:
        await client.close()
        proxy.close()
        await server.stop(1.0)
    assert len(seen) > 200 and b"row-data-" not in seen and b"Echo" not in seen


async def test_a_silent_connection_does_not_hold_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from kudu_async.rpc import server as server_mod

    monkeypatch.setattr(server_mod, "HANDSHAKE_TIMEOUT_S", 0.2)
    server, _ = await _server("optional")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(10), 2.0) == b""  # closed by the server after the timeout
        writer.close()
        client = RpcClient("clear")
        try:
            assert await client.call(server.address, "Test", "Echo", 3) == 3
        finally:
            await client.close()
    finally:
        await server.stop(1.0)


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

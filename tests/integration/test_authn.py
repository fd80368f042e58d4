"""Authentication on a real cluster with --rpc-authentication=required and JWTs: a client with a valid JWT
gets an authn token the tablet servers accept and works end to end; missing, expired, tampered and
wrong-issuer credentials are refused with NOT_AUTHORIZED; token-signing key rotation and token renewal
do not interrupt a writer; a master failover keeps the keys."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.rpc.client import RpcClient
from kudu_async.security.authn import kudu_token_header
from kudu_async.testing import MiniCluster
from kudu_async.tools.cli import main as kudu_tool

pytestmark = pytest.mark.integration

ROTATION_S = 3
AUTHN_VALIDITY_S = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(
        num_masters=3,
        num_tservers=3,
        base_dir=tmp_path_factory.mktemp("authn"),
        jwks=True,
        extra_flags=[
            "--rpc-authentication=required",
            f"--tsk-rotation-seconds={ROTATION_S}",
            f"--authn-token-validity-seconds={AUTHN_VALIDITY_S}",
            f"--authz-token-validity-seconds={AUTHN_VALIDITY_S}",
            "--heartbeat-interval-ms=300",
        ],
    )
    c.start()
    yield c
    c.shutdown()


def _masters(cluster: MiniCluster) -> list[str]:
    return cluster.master_addresses.split(",")


def _schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("val", type_=kudu.string)
    return b.build()


def _call(addr: str, authorization: bytes | None, service: str = "Generic", method: str = "Ping") -> Any:
    """One call with exactly these credentials."""

    async def go() -> Any:
        rpc = RpcClient("authn-test")
        rpc.set_credentials("mallory", authorization)
        try:
            return await rpc.call(addr, service, method, {}, timeout_s=5.0)
        finally:
            await rpc.close()

    return asyncio.run(go())


def _fresh_token(cluster: MiniCluster) -> bytes:
    """An authn token the leader master just issued for alice."""
    with kudu.connect(_masters(cluster), jwt=cluster.mint_jwt("alice")) as c:
        token = c._async.core.credentials.token
    assert token is not None
    return token


def test_a_valid_jwt_works_end_to_end_through_an_authn_token(cluster: MiniCluster) -> None:
    with kudu.connect(_masters(cluster), jwt=cluster.mint_jwt("alice"), require_authentication=True) as c:
        assert c._async.core.credentials.token is not None  # the leader master issued one; every call shows it
        t = c.create_table("authn_e2e", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3)
        s = c.new_session()
        for i in range(50):
            s.apply(t.new_insert({"key": i, "val": f"v{i}"}))
        s.flush()
        assert len(t.scanner().open().read_all_tuples()) == 50
    token = _fresh_token(cluster)
    for ts in cluster.tservers:  # the token itself, shown to each tablet server
        assert _call(ts.rpc_address, kudu_token_header(token)) is not None


def test_missing_and_bad_credentials_are_refused(cluster: MiniCluster) -> None:
    masters = _masters(cluster)
    with pytest.raises(kudu.KuduNotAuthorized, match=r"authentication required: .* sent no credentials"):
        kudu.connect(masters)
    with pytest.raises(kudu.KuduNotAuthorized, match="JWT expired"):
        kudu.connect(masters, jwt=cluster.mint_jwt("alice", ttl_s=-5))
    with pytest.raises(kudu.KuduNotAuthorized, match="wrong issuer"):
        kudu.connect(masters, jwt=cluster.mint_jwt("alice", iss="https://evil.test"))
    with pytest.raises(kudu.KuduNotAuthorized, match="wrong audience"):
        kudu.connect(masters, jwt=cluster.mint_jwt("alice", aud="elsewhere"))
    head, body, sig = cluster.mint_jwt("alice").split(".")
    forged_sig = ("A" if sig[0] != "A" else "B") + sig[1:]
    with pytest.raises(kudu.KuduNotAuthorized, match="bad signature"):
        kudu.connect(masters, jwt=f"{head}.{body}.{forged_sig}")
    # A user's JWT is no credential for a tablet server: users show it the master's authn token.
    with pytest.raises(kudu.KuduNotAuthorized, match="JWT of user 'alice' not accepted here"):
        _call(cluster.tservers[0].rpc_address, b"Bearer " + cluster.mint_jwt("alice").encode())
    token = _fresh_token(cluster)
    tampered = bytearray(token)
    tampered[len(tampered) // 3] ^= 1
    for node in (cluster.tservers[0], cluster.masters[0]):
        with pytest.raises(kudu.KuduNotAuthorized, match="authn token"):
            _call(node.rpc_address, kudu_token_header(bytes(tampered)))
    # The nodes keep serving after every refusal.
    assert _call(cluster.tservers[0].rpc_address, kudu_token_header(token)) is not None


def test_key_rotation_and_token_renewal_do_not_interrupt_a_writer(cluster: MiniCluster) -> None:
    ts = cluster.tservers[0]
    seq_before = cluster.http_json(ts, "/api/v1/status")["authn"]["tsk_seq"]
    with kudu.connect(_masters(cluster), jwt=cluster.mint_jwt("alice")) as c:
        first_token = c._async.core.credentials.token
        assert first_token is not None
        t = c.create_table("authn_rotation", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2))
        s = c.new_session()
        end = time.monotonic() + AUTHN_VALIDITY_S + ROTATION_S  # past the first token's expiry, 3+ rotations
        n = 0
        while time.monotonic() < end:
            s.apply(t.new_insert({"key": n, "val": "x"}))
            s.flush()
            n += 1
            time.sleep(0.05)
        assert len(t.scanner().open().read_all_tuples()) == n
        assert c._async.core.credentials.token != first_token  # renewed along the way, transparently
    assert cluster.http_json(ts, "/api/v1/status")["authn"]["tsk_seq"] >= seq_before + 2
    with pytest.raises(kudu.KuduNotAuthorized, match="authn token expired"):
        _call(ts.rpc_address, kudu_token_header(first_token))


def test_a_master_failover_keeps_the_keys(cluster: MiniCluster) -> None:
    with kudu.connect(_masters(cluster), jwt=cluster.mint_jwt("alice")) as c:
        t = c.create_table("authn_failover", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2))
        leader = next(m for m in cluster.masters if cluster.http_json(m, "/api/v1/status")["is_leader"])
        token = _fresh_token(cluster)
        cluster.kill_node(leader)
        try:
            others = [m for m in cluster.masters if m is not leader]
            deadline = time.monotonic() + 30
            while not any(cluster.http_json(m, "/api/v1/status")["is_leader"] for m in others):
                assert time.monotonic() < deadline, "no new leader master"
                time.sleep(0.2)
            # A token issued by the old leader verifies on the new masters and the tablet servers.
            for node in [*others, *cluster.tservers]:
                assert _call(node.rpc_address, kudu_token_header(token)) is not None
            s = c.new_session()
            s.apply(t.new_insert({"key": 1, "val": "after failover"}))
            s.flush()
            assert t.scanner().open().read_all_tuples() == [(1, "after failover")]
        finally:
            cluster.restart_node(leader)


def test_kudu_tool_takes_a_jwt_or_an_authn_token(
    cluster: MiniCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    masters = cluster.master_addresses
    assert kudu_tool(["table", "list", masters]) == 1
    assert "authentication required" in capsys.readouterr().err
    assert kudu_tool(["table", "list", masters, "-jwt", cluster.mint_jwt("alice")]) == 0
    assert "authn_e2e" in capsys.readouterr().out
    # A tablet server takes users' authn tokens, not their JWTs: the masters exchange the JWT for one.
    monkeypatch.setenv("KUDU_JWT", cluster.mint_jwt("alice"))
    assert kudu_tool(["tserver", "status", cluster.tservers[0].rpc_address, "-master_addresses", masters]) == 0
    monkeypatch.delenv("KUDU_JWT")
    token = base64.b64encode(_fresh_token(cluster)).decode()
    assert kudu_tool(["tserver", "status", cluster.tservers[1].rpc_address, "-authn_token", token]) == 0
    capsys.readouterr()
    # A malformed token is bad usage: Kudu's tool exits 1.
    assert kudu_tool(["table", "list", masters, "-authn_token", "!!"]) == 1
    assert "-authn_token must be the base64" in capsys.readouterr().err

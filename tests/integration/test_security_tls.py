"""TLS on a real cluster: rpc_encryption=required end to end, the cluster CA (IPKI) through a master
failover, node certificates signed by it, cleartext clients refused, no row data on loopback in clear,
and operator-given certificates keeping a node of another CA out."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

import kudu_async as kudu
from kudu_async.client.schema_builder import Partitioning
from kudu_async.common.errors import KuduNetworkError, KuduNotAuthorized, KuduTimedOut
from kudu_async.rpc import RpcClient
from kudu_async.schema import SchemaBuilder
from kudu_async.security import ca, tls
from kudu_async.testing import MiniCluster
from kudu_async.testing.mini_cluster import NodeProcess
from kudu_async.testing.waits import wait_for

pytestmark = pytest.mark.integration
MARKER = "cleartext-marker-7f3a9c"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(3, 3, base_dir=tmp_path_factory.mktemp("tls"), encryption="required")
    c.start()
    yield c
    c.shutdown()


def _ca_pem(cluster: MiniCluster) -> bytes:
    def fetch() -> bytes | None:
        for m in cluster.masters:
            if m.is_running():
                with contextlib.suppress(OSError):
                    status, body = cluster.http_get(m, "/ipki-ca-cert")
                    if status == 200:
                        return body
        return None

    return wait_for(fetch, 30.0, "the cluster CA certificate")


def _serves(cluster: MiniCluster, n: NodeProcess, pem: bytes) -> bool | None:
    return cluster.http_get(n, "/ipki-ca-cert")[1] == pem or None


def _presents_ca_signed_cert(address: str, ca_pem: bytes) -> bool | None:
    """A TLS handshake that verifies the server's certificate against the cluster CA."""
    ctx = tls.client_context(ca_pem)
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5.0) as raw, ctx.wrap_socket(raw) as s:
            return s.selected_alpn_protocol() == "h2" or None
    except (ssl.SSLError, OSError):
        return None


class _LoopbackCapture:
    """Every byte crossing the loopback interface while it runs (an AF_PACKET socket: needs root)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.data = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                self.data.extend(self.sock.recv(65536))

    def stop(self) -> bytes:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return bytes(self.data)


def test_required_encryption_end_to_end_with_no_cleartext_on_loopback(cluster: MiniCluster) -> None:
    try:
        capture = _LoopbackCapture()
    except PermissionError:
        pytest.skip("capturing loopback traffic needs root (CAP_NET_RAW)")
    # The capture sees cleartext when there is some (so its silence below means something).
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        with socket.create_connection(srv.getsockname()) as c:
            c.sendall(b"control-" + MARKER.encode())
            srv.accept()[0].close()
    try:
        with kudu.connect(cluster.master_addresses.split(",")) as client:
            b = kudu.schema_builder()
            b.add_column("key").type(kudu.int64).nullable(False).primary_key()
            b.add_column("val", type_=kudu.string)
            t = client.create_table("tls_rows", b.build(), kudu.Partitioning().add_hash_partitions(["key"], 3))
            s = client.new_session()
            for i in range(200):
                s.apply(t.new_insert({"key": i, "val": f"{MARKER}-{i}"}))
            s.flush()
            rows = t.scanner().open().read_all_tuples()
            assert sorted(rows) == [(i, f"{MARKER}-{i}") for i in range(200)]
    finally:
        seen = capture.stop()
    assert b"control-" + MARKER.encode() in seen
    # Row values are MARKER-<n>; the control above has no dash after it. (Loopback is shared: other
    # processes' traffic is in the capture too, hence the marker.)
    assert (MARKER + "-").encode() not in seen, "row data crossed loopback in clear"


def test_the_ca_serves_its_certificate_and_signs_the_masters(cluster: MiniCluster) -> None:
    pem = _ca_pem(cluster)
    cert = x509.load_pem_x509_certificate(pem)
    assert ca.common_name(cert) == ca.CA_COMMON_NAME
    leader = next(m for m in cluster.masters if cluster.http_json(m, "/api/v1/status")["is_leader"])
    assert cluster.http_get(leader, "/ipki-ca-cert-pem") == (200, pem)
    status, der = cluster.http_get(leader, "/ipki-ca-cert-der")
    assert status == 200 and der == ca.cert_der(pem)
    # Every master holds the same CA through the catalog and presents a certificate it signed.
    for n in cluster.masters:
        wait_for(functools.partial(_serves, cluster, n, pem), 10.0, f"{n.name} /ipki-ca-cert")
        wait_for(functools.partial(_presents_ca_signed_cert, n.rpc_address, pem), 15.0, f"{n.name} certificate")
    # Tservers that did not authenticate get no certificate: theirs stay self-signed (encrypted, not proved).
    for n in cluster.tservers:
        assert _presents_ca_signed_cert(n.rpc_address, pem) is None
    assert "not signing certificates for unauthenticated tservers" in leader.log_path.read_text()
    # A client that requires encryption and verifies the masters against the CA reaches them.
    with kudu.connect(
        cluster.master_addresses.split(","),
        encryption_policy=kudu.ENCRYPTION_REQUIRED,
        trusted_certificates=[pem.decode()],
    ) as client:
        assert "tls_rows" in client.list_tables()


def test_a_cleartext_client_is_refused_and_another_cas_certificate_too(cluster: MiniCluster) -> None:
    pem = _ca_pem(cluster)
    now = time.time()
    intruder = ca.CertAuthority.create(now)
    key = ca.key_to_pem(ca.generate_key())
    forged = ca.CertKey(intruder.sign(ca.make_csr(key, "kudu", []), "kudu", ["127.0.0.1"], now, 3600), key)

    async def scenario() -> None:
        clear = RpcClient("clear")
        wrong = RpcClient("wrong", tls=tls.ClientTls(tls.POLICY_REQUIRED, tls.client_context(pem, forged)))
        try:
            for n in (cluster.masters[0], cluster.tservers[0]):
                with pytest.raises(KuduNetworkError, match="accepts only TLS connections"):
                    await clear.call(n.rpc_address, "Generic", "Ping", {}, timeout_s=5.0)
                with pytest.raises(KuduNetworkError):
                    await wrong.call(n.rpc_address, "Generic", "Ping", {}, timeout_s=5.0)
        finally:
            await clear.close()
            await wrong.close()

    asyncio.run(scenario())
    assert "refused a cleartext RPC connection" in cluster.masters[0].log_path.read_text()


def test_a_master_failover_keeps_the_ca(cluster: MiniCluster) -> None:
    pem = _ca_pem(cluster)
    leader = next(m for m in cluster.masters if cluster.http_json(m, "/api/v1/status")["is_leader"])
    cluster.stop_node(leader)
    try:
        others = [m for m in cluster.masters if m is not leader]
        wait_for(
            lambda: any(cluster.http_json(m, "/api/v1/status")["is_leader"] for m in others) or None, 30.0, "leader"
        )
        new = next(m for m in others if cluster.http_json(m, "/api/v1/status")["is_leader"])
        assert cluster.http_get(new, "/ipki-ca-cert") == (200, pem)
        # Encrypted; not verified: the tservers' certificates are self-signed until they authenticate.
        with kudu.connect([m.rpc_address for m in others], encryption_policy=kudu.ENCRYPTION_REQUIRED) as client:
            t = client.table("tls_rows")
            assert len(t.scanner().open().read_all_tuples()) == 200
    finally:
        cluster.restart_node(leader)


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_operator_certificates_keep_a_node_of_another_ca_out(tmp_path: Path) -> None:
    now = time.time()
    good, bad = ca.CertAuthority.create(now), ca.CertAuthority.create(now)

    def flags(authority: ca.CertAuthority, name: str) -> list[str]:
        key = ca.key_to_pem(ca.generate_key())
        cert = authority.sign(ca.make_csr(key, "kudu", []), "kudu", ["127.0.0.1"], now, 3600)
        return [
            "--rpc-certificate-file",
            _write(tmp_path / f"{name}.crt", cert),
            "--rpc-private-key-file",
            _write(tmp_path / f"{name}.key", key),
            "--rpc-ca-certificate-file",
            _write(tmp_path / f"{name}-ca.crt", authority.cert_pem),
        ]

    c = MiniCluster(
        1,
        1,
        base_dir=tmp_path / "cluster",
        encryption="required",
        master_flags=flags(good, "master"),
        tserver_flags=flags(good, "ts-ok"),
    )
    with c:
        ok = c.tservers[0]
        wait_for(lambda: len(c.http_json(c.masters[0], "/api/v1/tservers")) == 1 or None, 20.0, "good tserver")
        # The cluster's tserver flags come first on its command line; the intruder's own files win.
        intruder = c.add_tserver(flags(bad, "ts-bad"))
        log = c.masters[0].log_path
        wait_for(lambda: "TLS handshake with RPC client" in log.read_text() or None, 20.0, "a refused handshake")
        time.sleep(1.0)  # a few more heartbeat periods: it never registers
        registered = [t["uuid"] for t in c.http_json(c.masters[0], "/api/v1/tservers")]
        assert registered == [ok.uuid] and intruder.uuid not in registered


def test_a_user_certificate_authenticates_the_client(tmp_path: Path) -> None:
    """Authentication by client certificate: with the operator's CA, a user whose certificate it signed
    (subject CN = the user) is that user on every node; without one, or with another CA's, refused."""
    now = time.time()
    authority, other = ca.CertAuthority.create(now), ca.CertAuthority.create(now)

    def cert(by: ca.CertAuthority, cn: str, name: str) -> tuple[str, str]:
        key = ca.key_to_pem(ca.generate_key())
        signed = by.sign(ca.make_csr(key, cn, []), cn, ["127.0.0.1"], now, 3600)
        return _write(tmp_path / f"{name}.crt", signed), _write(tmp_path / f"{name}.key", key)

    node_cert, node_key = cert(authority, "kudu", "node")
    ca_file = _write(tmp_path / "ca.crt", authority.cert_pem)
    node_flags = ["--rpc-certificate-file", node_cert, "--rpc-private-key-file", node_key]
    c = MiniCluster(
        1,
        1,
        base_dir=tmp_path / "cluster",
        encryption="required",
        extra_flags=[*node_flags, "--rpc-ca-certificate-file", ca_file, "--rpc-authentication=required"],
    )
    with c:
        wait_for(lambda: len(c.http_json(c.masters[0], "/api/v1/tservers")) == 1 or None, 20.0, "the tserver")
        masters = c.master_addresses.split(",")
        alice = kudu.connect(
            masters,
            client_certificate=cert(authority, "alice", "alice"),
            trusted_certificates=[ca_file],
            require_authentication=True,
        )
        try:
            b = SchemaBuilder()
            b.add_column("key").type("int64").nullable(False).primary_key()
            table = alice.create_table("by_cert", b.build(), Partitioning().add_hash_partitions(["key"], 2), 1)
            s = alice.new_session()
            for k in range(10):
                s.apply(table.new_insert({"key": k}))
            s.flush()
            assert len(alice.table("by_cert").scanner().open().read_all_tuples()) == 10
            # The master saw the certificate's user: its audit log names alice, authenticated by "cert".
            audit = c.masters[0].log_path.parent / "audit.log"
            wait_for(lambda: '"user": "alice", "authn": "cert"' in audit.read_text() or None, 10.0, "alice's audit")
        finally:
            alice.close()
        with pytest.raises(KuduNotAuthorized):  # no credentials
            kudu.connect(masters, admin_timeout_ms=3000).list_tables()
        with pytest.raises((KuduNotAuthorized, KuduNetworkError, KuduTimedOut)):  # another CA's: no handshake
            kudu.connect(
                masters, admin_timeout_ms=3000, client_certificate=cert(other, "mallory", "mallory")
            ).list_tables()

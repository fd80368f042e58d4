"""Nodes bound to wildcards (0.0.0.0, [::]) are known everywhere by their advertised addresses: in the
masters' tserver list, the Raft configs and table locations the client gets, the master list, the nodes'
status, and the names of the certificates the masters' CA signs (a client checking host names accepts
them). Loopback aliases (127.0.0.2-4) stand in for hosts, so this runs on any Linux machine; one tserver
is bound to and known by the IPv6 literal [::1] where the machine has IPv6 loopback."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import pytest
from cryptography import x509

import kudu_async as kudu
from kudu_async.testing import MiniCluster, NodePlacement

pytestmark = pytest.mark.integration


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


V6 = _has_ipv6_loopback()
PLACEMENTS = [
    NodePlacement("127.0.0.2", bind="0.0.0.0"),  # the master
    NodePlacement("127.0.0.1", bind="::", advertised="localhost"),  # IPv4 and IPv6, known by a name
    NodePlacement("127.0.0.3", bind="0.0.0.0"),
    # Bound to, and so known by, an IPv6 literal: '[::1]:port' in registrations, Raft configs, locations.
    NodePlacement("::1") if V6 else NodePlacement("127.0.0.4", bind="0.0.0.0"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    # jwks: the tservers authenticate to the master (a service JWT), which then signs their certificates.
    c = MiniCluster(
        num_masters=1, num_tservers=3, base_dir=tmp_path_factory.mktemp("adv"), placements=PLACEMENTS, jwks=True
    )
    c.start()
    yield c
    c.shutdown()


def _wait(what: str, check: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def test_wildcard_bound_nodes_are_known_by_their_advertised_addresses(cluster: MiniCluster) -> None:
    master = cluster.masters[0]
    assert master.rpc_address.startswith("127.0.0.2:")
    for n in cluster.nodes:
        st = cluster.http_json(n, "/api/v1/status")
        assert (st["rpc_address"], st["http_address"]) == (n.rpc_address, n.http_address)
        assert st["rpc_addresses"] == [n.rpc_address] and st["http_addresses"] == [n.http_address]
        bind = {"::": "[::]", "": n.rpc_address.rpartition(":")[0]}.get(n.placement.bind, n.placement.bind)
        assert st["bound_rpc_addresses"] == [f"{bind}:{n.rpc_port}"]
        assert st["bound_http_addresses"] == [f"{bind}:{n.http_port}"]

    def registered() -> bool:
        seen = {d["uuid"]: d for d in cluster.http_json(master, "/api/v1/tservers")}
        return all(
            ts.uuid in seen
            and (seen[ts.uuid]["rpc_address"], seen[ts.uuid]["http_address"]) == (ts.rpc_address, ts.http_address)
            for ts in cluster.tservers
        )

    _wait("the tservers registered at their advertised addresses", registered)

    with kudu.connect(cluster.master_addresses.split(",")) as client:
        assert [m["rpc_address"] for m in client.list_masters()] == [master.rpc_address]
        assert sorted(ts["rpc_address"] for ts in client.list_tablet_servers()) == sorted(
            ts.rpc_address for ts in cluster.tservers
        )
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        b.add_column("val", type_=kudu.string)
        part = kudu.Partitioning().add_hash_partitions(["key"], 2)
        table = client.create_table("advertised", b.build(), part, n_replicas=3)
        session = client.new_session()
        for i in range(200):
            session.apply(table.new_insert({"key": i, "val": f"v{i}"}))
        session.flush()
        assert sorted(r[0] for r in table.scanner().open().read_all_tuples()) == list(range(200))
        tokens = table.scan_token_builder().build()
        hosts = {r.ts().hostname() for t in tokens for r in t.tablet().replicas()}
        assert hosts == {"localhost", "127.0.0.3", "::1" if V6 else "127.0.0.4"}


def test_certificates_carry_the_advertised_names(cluster: MiniCluster) -> None:
    """Each node's certificate, signed by the masters' CA, verifies with host-name checking at the address
    the cluster knows it by, over IPv4, and over IPv6 for the node bound to [::]."""
    master = cluster.masters[0]
    for n in cluster.nodes:
        _wait(
            f"{n.name}'s certificate from the CA",
            lambda n=n: cluster.http_json(n, "/api/v1/status")["tls"]["certificate_signed"],
        )
    status, ca_pem = cluster.http_get(master, "/ipki-ca-cert")
    assert status == 200
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    ctx.set_alpn_protocols(["h2"])
    assert ctx.check_hostname
    # (where to connect, port, the name to check)
    targets = [(n.placement.host, n.rpc_port, n.placement.host) for n in cluster.nodes]
    if V6:
        targets.append(("::1", cluster.tservers[0].rpc_port, "localhost"))  # the [::]-bound node over IPv6
    for host, port, name in targets:
        with (
            socket.create_connection((host, port), timeout=5.0) as raw,
            ctx.wrap_socket(raw, server_hostname=name) as s,
        ):
            der = s.getpeercert(binary_form=True)
        assert der is not None
        sans = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names = {str(v) for v in sans.value.get_values_for_type(x509.DNSName)} | {
            str(v) for v in sans.value.get_values_for_type(x509.IPAddress)
        }
        assert name in names

"""A cluster secured the way production runs: TLS required everywhere with the masters' CA, users and
servers authenticated (JWTs, then authn tokens), and the table privileges enforced on the data path.

The whole chain on real processes: the tablet servers present their service JWT, get their certificates
signed by the cluster CA through heartbeats, and a client that trusts only that CA (and refuses anything
not encrypted) reads and writes through every node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import kudu_async
from kudu_async.client.schema_builder import Partitioning
from kudu_async.common.errors import KuduNotAuthorized
from kudu_async.schema import SchemaBuilder
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration

POLICY = {"grant": [{"users": ["alice"], "tables": ["default.*"], "privileges": ["ALL"]}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(
        num_masters=1, num_tservers=3, base_dir=tmp_path_factory.mktemp("secure"), secure=True, authz_policy=POLICY
    )
    c.start()
    try:
        yield c
    finally:
        c.shutdown()


def test_a_client_trusting_only_the_cluster_ca_works_through_every_node(cluster: MiniCluster) -> None:
    deadline = time.monotonic() + 30
    status, ca_pem = cluster.http_get(cluster.masters[0], "/ipki-ca-cert")
    while status == 503:  # the leader master writes the CA to the catalog just after its election
        assert time.monotonic() < deadline, "the leader master never created the cluster CA"
        time.sleep(0.2)
        status, ca_pem = cluster.http_get(cluster.masters[0], "/ipki-ca-cert")
    assert status == 200 and ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    while not all(cluster.http_json(t, "/api/v1/status")["tls"]["certificate_signed"] for t in cluster.tservers):
        assert time.monotonic() < deadline, "tablet servers never got certificates from the cluster CA"
        time.sleep(0.2)
    client = kudu_async.connect(
        cluster.master_addresses.split(","),
        jwt=cluster.mint_jwt("alice"),
        require_authentication=True,
        encryption_policy=kudu_async.ENCRYPTION_REQUIRED,
        trusted_certificates=[ca_pem.decode()],
    )
    try:
        b = SchemaBuilder()
        b.add_column("key").type("int64").nullable(False).primary_key()
        b.add_column("v").type("string")
        table = client.create_table("secured", b.build(), Partitioning().add_hash_partitions(["key"], 3), n_replicas=3)
        rows = 3000
        client.new_session().apply_arrow(
            table, pa.table({"key": np.arange(rows), "v": [f"v{i}" for i in range(rows)]}), "insert"
        )
        got = client.table("secured").scanner().open().read_all_tuples()
        assert len(got) == rows and sum(k for k, _ in got) == rows * (rows - 1) // 2
        # Three replicas per tablet: every write reached a majority over the servers' mutual TLS.
        client.delete_table("secured")
    finally:
        client.close()
    # Without credentials: refused before anything is read.
    with pytest.raises(KuduNotAuthorized):
        anon = kudu_async.connect(
            cluster.master_addresses.split(","),
            encryption_policy=kudu_async.ENCRYPTION_REQUIRED,
            trusted_certificates=[ca_pem.decode()],
        )
        try:
            anon.list_tables()
        finally:
            anon.close()


def test_admin_pages_want_a_jwt_and_healthz_stays_open(cluster: MiniCluster) -> None:
    import ssl
    import urllib.error
    import urllib.request

    url = cluster.masters[0].http_url
    assert url.startswith("https://")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def get(path: str, token: str | None) -> int:
        req = urllib.request.Request(url + path)
        if token is not None:
            req.add_header("authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    assert get("/healthz", None) == 200
    assert get("/api/v1/status", None) == 401
    assert get("/api/v1/status", "not.a.jwt") == 401
    assert get("/api/v1/status", cluster.mint_jwt("alice")) == 200
    assert get("/api/v1/status", cluster.mint_jwt("alice", ttl_s=-60.0)) == 401

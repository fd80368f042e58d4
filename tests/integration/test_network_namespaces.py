"""A cluster across network namespaces, each a host of its own: a master and three tablet servers, each
in its namespace with its own address on a private network, bound to 0.0.0.0 and known by a host name
(``--rpc-advertised-addresses``, resolved through each namespace's hosts file), and a client in a fifth
namespace that creates a table, writes and reads rows, and checks host names against the certificates
the masters' CA signed. Nothing goes through 127.0.0.1. Needs root (skipped otherwise, or where the
kernel makes no namespaces); everything made is removed after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kudu_async.testing import MiniCluster, NodePlacement
from kudu_async.testing.netns import NetnsLab, NetnsUnavailable

pytestmark = pytest.mark.integration

DOMAIN = "kudu.test"
NODES = ["master-0", "tserver-0", "tserver-1", "tserver-2"]
CLIENT_TIMEOUT_S = 60.0
CERT_WAIT_S = 20.0

# Run in the client's namespace: everything the client sees, as JSON on stdout.
CLIENT = textwrap.dedent(
    """
    import json, socket, ssl, sys, urllib.request
    import kudu_async as kudu

    masters, ca_url = sys.argv[1], sys.argv[2]
    out = {}
    with kudu.connect(masters.split(",")) as client:
        out["masters"] = [m["rpc_address"] for m in client.list_masters()]
        out["tservers"] = sorted(ts["rpc_address"] for ts in client.list_tablet_servers())
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        b.add_column("val", type_=kudu.string)
        part = kudu.Partitioning().add_hash_partitions(["key"], 3)
        table = client.create_table("across_hosts", b.build(), part, n_replicas=3)
        session = client.new_session()
        for i in range(300):
            session.apply(table.new_insert({"key": i, "val": "v%d" % i}))
        session.flush()
        out["keys"] = sorted(r[0] for r in table.scanner().open().read_all_tuples())
        tokens = table.scan_token_builder().build()
        reps = [r.ts() for t in tokens for r in t.tablet().replicas()]
        out["replicas"] = sorted({"%s:%d" % (ts.hostname(), ts.port()) for ts in reps})
    ca_pem = urllib.request.urlopen(ca_url, timeout=10).read().decode()
    ctx = ssl.create_default_context(cadata=ca_pem)
    ctx.set_alpn_protocols(["h2"])
    out["verified"] = []
    for addr in out["tservers"]:
        host, _, port = addr.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as s:
                out["verified"].append((addr, s.selected_alpn_protocol()))
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def lab() -> Iterator[NetnsLab]:
    try:
        with NetnsLab([f"{n}.{DOMAIN}" for n in NODES] + [f"client.{DOMAIN}"]) as made:
            yield made
    except NetnsUnavailable as e:
        pytest.skip(f"network namespaces cannot be made here: {e}")


@pytest.fixture(scope="module")
def cluster(lab: NetnsLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    placements = [NodePlacement(h.address, bind="0.0.0.0", advertised=h.hostname, netns=h.netns) for h in lab.hosts[:4]]
    c = MiniCluster(
        num_masters=1,
        num_tservers=3,
        base_dir=tmp_path_factory.mktemp("netns"),
        placements=placements,
        ports=[(7051, 8051), (7050, 8050), (7050, 8050), (7050, 8050)],  # each host has Kudu's ports to itself
        jwks=True,  # the tservers authenticate to the master (a service JWT), which then signs their certificates
    )
    try:
        c.start()
        yield c
    finally:
        c.shutdown()


def test_cluster_across_namespaces_by_host_name(lab: NetnsLab, cluster: MiniCluster) -> None:
    master = cluster.masters[0]
    assert cluster.master_addresses == f"master-0.{DOMAIN}:7051"
    deadline = time.monotonic() + CERT_WAIT_S
    for n in cluster.nodes:
        st = cluster.http_json(n, "/api/v1/status")
        assert (st["rpc_address"], st["bound_rpc_addresses"]) == (n.rpc_address, [f"0.0.0.0:{n.rpc_port}"])
        assert st["http_address"] == n.http_address
        while not st["tls"]["certificate_signed"]:
            assert time.monotonic() < deadline, f"{n.name} holds no certificate from the CA after {CERT_WAIT_S}s"
            time.sleep(0.2)
            st = cluster.http_json(n, "/api/v1/status")
    client_host = lab.hosts[4]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")) if p
    )
    done = subprocess.run(
        [
            *lab.exec_prefix(client_host),
            sys.executable,
            "-P",
            "-c",
            CLIENT,
            cluster.master_addresses,
            f"http://{master.http_address}/ipki-ca-cert",
        ],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"client failed:\n{done.stderr[-3000:]}"
    seen = json.loads(done.stdout.splitlines()[-1])
    tservers = sorted(ts.rpc_address for ts in cluster.tservers)
    assert seen["masters"] == [f"master-0.{DOMAIN}:7051"]
    assert seen["tservers"] == tservers == [f"tserver-{i}.{DOMAIN}:7050" for i in range(3)]
    assert seen["keys"] == list(range(300))
    assert seen["replicas"] == tservers
    assert [tuple(v) for v in seen["verified"]] == [(a, "h2") for a in tservers]
    # The masters' view, read from the root namespace by IP: every tserver by its name, none by loopback.
    listed = cluster.http_json(master, "/api/v1/tservers")
    assert sorted(d["rpc_address"] for d in listed) == tservers
    assert sorted(d["http_address"] for d in listed) == sorted(ts.http_address for ts in cluster.tservers)
    assert "127.0.0.1" not in json.dumps(listed)

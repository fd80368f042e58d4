"""What rpc/jh2_fast.py relies on in jh2: these fail naming the member when a jh2 release changes it."""

from __future__ import annotations

import re
from pathlib import Path

import jh2.config
import jh2.connection
import jh2.events

from kudu_async.rpc.jh2_fast import TESTED_JH2, check_internals, jh2_version, make_h2_connection


def test_jh2_internals_are_what_the_fast_connection_overrides() -> None:
    problems = check_internals()
    assert problems == [], "jh2 changed under rpc/jh2_fast.py:\n" + "\n".join(problems)


def test_installed_jh2_is_in_the_tested_range_pinned_in_pyproject() -> None:
    low, high = TESTED_JH2
    assert low <= jh2_version() <= high, (
        f"jh2 {jh2_version()} is outside the range rpc/jh2_fast.py was checked against {TESTED_JH2}: "
        "run tests/unit/rpc, then widen TESTED_JH2 and the pin in pyproject.toml"
    )
    text = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    pin = re.search(r'"jh2>=([\d.]+),<=([\d.]+)"', text)
    assert pin is not None, "pyproject.toml must pin jh2 as >=LOW,<=HIGH"
    assert (pin.group(1), pin.group(2)) == tuple(".".join(map(str, v)) for v in TESTED_JH2)


def _exchange(make: object) -> list[bytes]:
    """A scripted client/server exchange; every batch of bytes each side sent, in order."""
    client = make(True)  # type: ignore[operator]
    server = make(False)  # type: ignore[operator]
    sent: list[bytes] = []

    def move(a: jh2.connection.H2Connection, b: jh2.connection.H2Connection) -> None:
        data = a.data_to_send()
        sent.append(data)
        if data:
            for ev in b.receive_data(data):
                if isinstance(ev, jh2.events.DataReceived) and ev.flow_controlled_length:
                    b.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)

    client.initiate_connection()
    server.initiate_connection()
    move(client, server)
    move(server, client)
    move(client, server)
    body = bytes(range(256)) * 100
    for i in range(300):  # past the amortised open-stream count's first rescan
        sid = client.get_next_available_stream_id()
        headers = [(b":method", b"POST"), (b":path", f"/x/{i}".encode()), (b":scheme", b"http"), (b":authority", b"a")]
        client.send_headers(sid, headers)
        client.send_data(sid, memoryview(body)[: 100 + i], end_stream=True)
        move(client, server)
        server.send_headers(sid, [(b":status", b"200")])
        server.send_data(sid, body[:i], end_stream=True)
        move(server, client)
        move(client, server)
    return sent


def _plain(client_side: bool) -> jh2.connection.H2Connection:
    return jh2.connection.H2Connection(
        config=jh2.config.H2Configuration(
            client_side=client_side,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
            normalize_inbound_headers=False,
        )
    )


def test_the_fast_connection_sends_exactly_the_bytes_jh2_sends() -> None:
    assert _exchange(make_h2_connection) == _exchange(_plain)

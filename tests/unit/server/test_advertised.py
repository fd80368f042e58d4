"""What a node tells others its address is: the advertised-addresses flags, wildcards, machine names,
and listening on ``[::]`` for IPv4 and IPv6 at once."""

from __future__ import annotations

import socket

import pytest

from kudu_async.common.errors import KuduConfigurationError
from kudu_async.rpc.server import dual_stack_listener
from kudu_async.server.config import (
    advertised_addresses,
    is_wildcard,
    load_config,
    parse_advertised_addresses,
    parse_master_addresses,
)
from kudu_async.server.node import machine_name


def _ts(*extra: str) -> list[str]:
    return ["--role", "tserver", "--data-dir", "/d", *extra]


@pytest.mark.parametrize(
    ("host", "wild"),
    [("0.0.0.0", True), ("::", True), ("[::]", True), ("", True), ("127.0.0.1", False), ("ts1", False)],
)
def test_wildcards(host: str, wild: bool) -> None:
    assert is_wildcard(host) is wild


def test_advertised_list_keeps_order_and_leaves_missing_ports_to_the_node() -> None:
    assert parse_advertised_addresses("ts1.example.com:7050, 10.0.0.5,[fd00::5]:17050") == [
        ("ts1.example.com", 7050),
        ("10.0.0.5", None),
        ("fd00::5", 17050),
    ]


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("0.0.0.0:7050", "wildcard"),
        ("[::]:7050", "wildcard"),
        ("ts1:0", "port 0"),
        ("ts1:7050,ts1:7050", "twice"),
        ("ts1:7050,,ts2", "empty entry"),
        ("fd00::5:7050", "bracketed"),
        ("ts1:99999", "bad port"),
        ("bad host:7050", "neither an IP address nor a host name"),
        ("[ts1]:7050", "neither an IP address nor a host name"),
        ("-ts1:7050", "neither an IP address nor a host name"),
    ],
)
def test_bad_advertised_addresses_are_refused_naming_the_flag(flag: str, needle: str) -> None:
    for name in ("--rpc-advertised-addresses", "--webserver-advertised-addresses"):
        with pytest.raises(KuduConfigurationError) as ei:
            load_config(_ts(f"{name}={flag}"), {})
        assert name in str(ei.value) and needle in str(ei.value)


@pytest.mark.parametrize(
    ("bind", "ok"),
    [("0.0.0.0:7050", True), ("[::]:7050", True), ("ts1.example.com:7050", True), ("bad host:1", False)],
)
def test_bind_accepts_wildcards_ips_and_names(bind: str, ok: bool) -> None:
    if ok:
        assert load_config(_ts("--rpc-bind", bind, "--http-bind", bind), {}).rpc_bind == bind
    else:
        with pytest.raises(KuduConfigurationError, match="--rpc-bind"):
            load_config(_ts("--rpc-bind", bind), {})


def test_master_addresses_take_names_and_v6_but_no_wildcard() -> None:
    assert parse_master_addresses("m1.example.com,[fd00::1]:7151") == ["m1.example.com:7051", "[fd00::1]:7151"]
    with pytest.raises(ValueError, match="wildcard"):
        parse_master_addresses("0.0.0.0:7051")
    with pytest.raises(KuduConfigurationError, match="--master-addresses"):
        load_config(_ts("--master-addresses", "[::]"), {})


def test_advertised_address_first_then_bound_then_machine_name() -> None:
    # The flag wins; a bare host takes the port the node bound.
    assert advertised_addresses("ts1.example.com,10.0.0.5:17050", "0.0.0.0", 7050, None) == [
        "ts1.example.com:7050",
        "10.0.0.5:17050",
    ]
    assert advertised_addresses("", "10.0.0.5", 7050, "ignored") == ["10.0.0.5:7050"]
    assert advertised_addresses("", "::", 7050, "ts1.example.com") == ["ts1.example.com:7050"]
    assert advertised_addresses("", "fd00::5", 7050, None) == ["[fd00::5]:7050"]
    with pytest.raises(ValueError, match="wildcard"):
        advertised_addresses("", "0.0.0.0", 7050, None)


def test_certificate_names_are_every_name_the_node_is_known_by() -> None:
    c = load_config(
        _ts(
            "--rpc-bind",
            "0.0.0.0:7050",
            "--http-bind",
            "10.0.0.5:8050",
            "--rpc-advertised-addresses",
            "ts1.example.com:7050,10.1.0.5",
            "--webserver-advertised-addresses",
            "ts1-web.example.com",
        ),
        {},
    )
    assert c.advertised_hosts() == ["ts1.example.com", "10.1.0.5", "ts1-web.example.com", "10.0.0.5"]


def test_machine_name_is_the_canonical_name_of_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "ts1")
    calls: list[str] = []

    def resolve(host: str, *args: object, **kw: object) -> list[tuple[object, ...]]:
        calls.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "ts1.example.com", ("10.0.0.5", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert machine_name() == ("ts1.example.com", False) and calls == ["ts1"]

    monkeypatch.setattr(
        socket, "getaddrinfo", lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.1.1", 0))]
    )
    assert machine_name() == ("ts1", True)  # no canonical name; loopback only: the node warns

    def fail(*a: object, **k: object) -> None:
        raise socket.gaierror("unknown")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    assert machine_name() == ("ts1", False)


@pytest.mark.skipif(not socket.has_dualstack_ipv6(), reason="no dual-stack sockets on this system")
def test_listening_on_v6_wildcard_takes_ipv4_too() -> None:
    assert dual_stack_listener("127.0.0.1", 0) is None
    listener = dual_stack_listener("[::]", 0)
    assert listener is not None
    with listener:
        listener.setblocking(True)
        port = listener.getsockname()[1]
        for host in ("127.0.0.1", "::1"):
            with socket.create_connection((host, port), timeout=5.0):
                conn, _ = listener.accept()
                conn.close()

"""connect()'s master address forms: kudu-python's host/port and lists of both, plus "h:p" strings."""

from __future__ import annotations

from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.client.aio import master_addresses
from kudu_async.client.meta_cache import parse_master_addresses


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("m1", 7051, ["m1:7051"]),
        ("m1", None, ["m1:7051"]),
        ("m1", 9000, ["m1:9000"]),
        ("m1:7151", None, ["m1:7151"]),
        ("m1:7151", 9000, ["m1:7151"]),  # an explicit port wins over the default one
        ("m1:1,m2:2, m3:3 ", None, ["m1:1", "m2:2", "m3:3"]),
        ("m1,m2:2", 9, ["m1:9", "m2:2"]),
        (["m1", "m2", "m3"], [1, 2, 3], ["m1:1", "m2:2", "m3:3"]),
        (["m1", "m2"], 7051, ["m1:7051", "m2:7051"]),
        (("m1", "m2"), (5, 6), ["m1:5", "m2:6"]),
        (["m1:1", "m2:2"], None, ["m1:1", "m2:2"]),
        (["m1:1", "m1:1", "m2:2"], None, ["m1:1", "m2:2"]),  # duplicates collapse, order kept
        ("[::1]:7051", None, ["[::1]:7051"]),
        ("[::1]", 7151, ["[::1]:7151"]),
    ],
)
def test_master_address_forms(host: Any, port: Any, expected: list[str]) -> None:
    assert master_addresses(host, port) == expected


@pytest.mark.parametrize(
    ("host", "port", "complaint"),
    [
        ("", 7051, "no master host"),
        ([], 7051, "no master host"),
        (" , ", 7051, "no master host"),
        (["m1", "m2"], [1], "2 hosts but 1 ports"),
        (["m1"], [1, 2], "1 hosts but 2 ports"),
        ("m1", "7051", "port must be"),
        ("m1", 7051.0, "port must be"),
        ("m1", True, "port must be"),
        (7051, None, "host must be"),
        ("m1:0", None, "1..65535"),
        ("m1", 70000, "1..65535"),
        ("m1", -1, "1..65535"),
        ("m1:abc", None, "1..65535"),
        ("m1:", None, "1..65535"),
        (["m1", "m2"], ["x", "y"], "port"),
        (["m1"], [True], "port"),
        (["m1", 3], None, "host"),
        ([None], None, "host"),
    ],
)
def test_bad_master_addresses_are_refused_naming_the_problem(host: Any, port: Any, complaint: str) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        master_addresses(host, port)


def test_parse_master_addresses_normalises_ports_and_refuses_hostless() -> None:
    assert parse_master_addresses(["h:0007051"]) == ["h:7051"]
    with pytest.raises(kudu.KuduInvalidArgument, match="host:port"):
        parse_master_addresses([":7051"])
    with pytest.raises(kudu.KuduInvalidArgument, match="at least one"):
        parse_master_addresses([])


def test_connect_with_a_bad_address_fails_before_any_network_call() -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=r"1\.\.65535"):
        kudu.connect("127.0.0.1", 0)


async def test_async_connect_gives_up_within_its_admin_timeout_when_no_master_answers() -> None:
    import kudu_async.aio as kaio
    from kudu_async.testing.mini_cluster import free_port

    port = free_port()  # nothing listens there
    with pytest.raises(kudu.KuduTimedOut, match="connecting to the leader master") as ei:
        await kaio.connect("127.0.0.1", port, admin_timeout_ms=600)
    assert ei.value.details["attempts"] >= 1


def test_a_failed_blocking_connect_leaves_no_loop_thread_behind() -> None:
    import threading

    from kudu_async.testing.mini_cluster import free_port

    before = set(threading.enumerate())  # clients other tests keep open (e.g. a data source's cache) stay
    with pytest.raises(kudu.KuduTimedOut, match="connecting to the leader master timed out"):
        kudu.connect("127.0.0.1", free_port(), admin_timeout_ms=300)
    assert not [t for t in set(threading.enumerate()) - before if t.name == "kudu-client"]

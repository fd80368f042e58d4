"""CreateTablet's request is checked whole at decode: what needs no tablet server state never reaches the
tablet manager."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.rpc.messages import decoder_for
from kudu_async.tserver.messages import CreateTabletRequest

decode = decoder_for(CreateTabletRequest)
GOOD: dict[str, Any] = {
    "tablet_id": "tablet-1",
    "table_id": "t",
    "schema": {"columns": []},
    "peers": {"ts-a": "127.0.0.1:7050", "ts-b": "127.0.0.1:7051"},
}


def test_a_master_request_decodes_with_its_defaults() -> None:
    req = decode(msgpack.packb({**GOOD, "first_leader": "ts-b"}))
    assert (req.tablet_id, req.first_leader, req.schema_version, req.table_name) == ("tablet-1", "ts-b", 0, "")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tablet_id": "../x"}, "tablet_id"),
        ({"tablet_id": "x" * 129}, "tablet_id"),
        ({"table_id": ""}, "table_id"),
        ({"peers": {}}, "peers"),
        ({"peers": {"ts-a": 7050}}, "peers"),
        ({"schema": []}, "schema"),
        ({"schema_version": -1}, "schema_version"),
        ({"first_leader": "ts-z"}, "first_leader"),
        ({"first_leader": ["ts-a"]}, "first_leader"),
        ({"partition": "p"}, "partition"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(KuduInvalidArgument, match=f"'{field}"):
        decode(msgpack.packb({**GOOD, **change}))

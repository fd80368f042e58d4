"""The body codec and the wire form of errors."""

from __future__ import annotations

import base64
import json

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kudu_async.common.errors import STATUS_CLASSES, KuduInvalidRequest, error_from_dict
from kudu_async.rpc import codec

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@given(_values)
def test_msgpack_round_trip_keeps_bytes_and_text_apart(value: object) -> None:
    assert codec.decode(codec.encode(value, codec.MSGPACK), codec.MSGPACK) == value


def test_msgpack_allows_integer_map_keys() -> None:
    assert codec.decode_msgpack(codec.encode_msgpack({1: "a", 2: b"b"})) == {1: "a", 2: b"b"}


def test_json_round_trip_of_plain_values() -> None:
    value = {"a": [1, 2.5, None, True], "b": {"c": "ü"}}
    assert codec.decode(codec.encode(value, codec.JSON), codec.JSON) == value


def test_json_answers_carry_bytes_as_base64_strings() -> None:
    out = json.loads(codec.encode_json({"blob": b"\x00\xffab", b"key": 1}))
    assert out["blob"] == base64.b64encode(b"\x00\xffab").decode()
    assert out[base64.b64encode(b"key").decode()] == 1


def test_empty_body_decodes_to_none_in_both_codecs() -> None:
    assert codec.decode(b"", codec.MSGPACK) is None
    assert codec.decode(b"", codec.JSON) is None


@pytest.mark.parametrize("body", [b"\xc1", b"\x92\x01", msgpack.packb(1) + b"\x01"])
def test_malformed_msgpack_is_an_invalid_request(body: bytes) -> None:
    with pytest.raises(KuduInvalidRequest, match="malformed msgpack"):
        codec.decode_msgpack(body)


@pytest.mark.parametrize("body", [b"{", b"{'a': 1}", b"\xff\xfe"])
def test_malformed_json_is_an_invalid_request(body: bytes) -> None:
    with pytest.raises(KuduInvalidRequest, match="malformed JSON"):
        codec.decode_json(body)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b"application/msgpack", codec.MSGPACK),
        (b"application/x-msgpack", codec.MSGPACK),
        (b"Application/JSON; charset=utf-8", codec.JSON),
        ("application/json", codec.JSON),
        (b"text/plain", None),
        (b"application/x-www-form-urlencoded", None),
        (None, None),
    ],
)
def test_content_type_recognition(header: bytes | str | None, expected: str | None) -> None:
    assert codec.canonical_content_type(header) == expected


def test_parse_addr_forms() -> None:
    assert codec.parse_addr("127.0.0.1:7051") == ("127.0.0.1", 7051)
    assert codec.parse_addr("[::1]:7050") == ("::1", 7050)
    for bad in ("nohost", ":7051", "h:", "h:99999", "h:x"):
        with pytest.raises(ValueError, match="bad address"):
            codec.parse_addr(bad)


@pytest.mark.parametrize("code", sorted(STATUS_CLASSES))
@pytest.mark.parametrize("content_type", [codec.MSGPACK, codec.JSON])
def test_every_status_code_survives_the_wire_form(code: str, content_type: str) -> None:
    cls = STATUS_CLASSES[code]
    err = cls("what happened", {"x": 1})
    back = error_from_dict(codec.decode(codec.encode(err.to_dict(), content_type), content_type))
    assert type(back) is cls
    assert back.message == "what happened"
    assert back.details == {"x": 1}

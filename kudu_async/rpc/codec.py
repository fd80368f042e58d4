"""Body codec of the RPC layer: msgpack for programs, JSON for people with curl.

Every call body is either ``application/msgpack`` (the normal case: compact, and ``bytes`` travel as
msgpack ``bin`` so Arrow IPC payloads are never re-encoded) or ``application/json`` (so that
``curl --http2-prior-knowledge -H 'content-type: application/json' -d '{}' http://HOST:PORT/Generic/Ping``
works for debugging). The answer uses the same content type as the request.

JSON cannot carry bytes: in JSON answers every ``bytes`` value becomes its standard base64 string
(``base64.b64encode(...).decode("ascii")``), and ``bytes`` map keys likewise. This is lossy on purpose:
JSON is for reading, programs use msgpack. An empty body decodes to ``None`` in both codecs so that
``curl -X POST`` without ``-d`` works.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import msgpack

from kudu_async.common.errors import KuduInvalidRequest

MSGPACK = "application/msgpack"
JSON = "application/json"
MSGPACK_B = MSGPACK.encode()
JSON_B = JSON.encode()

# Accepted spellings of the two content types (lower-case, parameters stripped) -> canonical form.
_CONTENT_TYPES: dict[bytes, str] = {
    MSGPACK_B: MSGPACK,
    b"application/x-msgpack": MSGPACK,
    b"application/vnd.msgpack": MSGPACK,
    JSON_B: JSON,
}


def canonical_content_type(header: bytes | str | None) -> str | None:
    """Map a content-type header value to MSGPACK or JSON; ``None`` when it is neither (or absent)."""
    if header is None:
        return None
    raw = header.encode("latin-1") if isinstance(header, str) else header
    hit = _CONTENT_TYPES.get(raw)
    if hit is not None:
        return hit
    return _CONTENT_TYPES.get(raw.split(b";", 1)[0].strip().lower())


def encode_msgpack(obj: Any) -> bytes:
    """msgpack with ``bin`` for bytes and ``str`` for text (use_bin_type=True)."""
    out: bytes = msgpack.packb(obj, use_bin_type=True)
    return out


def decode_msgpack(body: bytes) -> Any:
    """Decode one msgpack object; trailing bytes or garbage raise KuduInvalidRequest."""
    if not body:
        return None
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types (ValueError, ExtraData, ...)
        raise KuduInvalidRequest(f"malformed msgpack body ({len(body)} bytes): {e}") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(obj)).decode("ascii")
    if isinstance(obj, set | frozenset):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


def _jsonable_keys(obj: Any) -> Any:
    """Rewrite map keys JSON refuses (bytes, tuples) to strings; only used on the slow path."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, bytes | bytearray):
                k = base64.b64encode(bytes(k)).decode("ascii")
            elif not isinstance(k, str | int | float | bool) and k is not None:
                k = str(k)
            out[k] = _jsonable_keys(v)
        return out
    if isinstance(obj, list | tuple):
        return [_jsonable_keys(v) for v in obj]
    return obj


def encode_json(obj: Any) -> bytes:
    """JSON (UTF-8); bytes become base64 strings as documented in the module docstring."""
    try:
        text = json.dumps(obj, default=_json_default, separators=(",", ":"), ensure_ascii=False)
    except TypeError:
        text = json.dumps(_jsonable_keys(obj), default=_json_default, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def decode_json(body: bytes) -> Any:
    """Decode a UTF-8 JSON document; anything else raises KuduInvalidRequest."""
    if not body or body.isspace():
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise KuduInvalidRequest(f"malformed JSON body ({len(body)} bytes): {e}") from None


def encode(obj: Any, content_type: str) -> bytes:
    """Encode with the codec named by a canonical content type."""
    return encode_json(obj) if content_type == JSON else encode_msgpack(obj)


def decode(body: bytes, content_type: str) -> Any:
    """Decode with the codec named by a canonical content type; raises KuduInvalidRequest."""
    return decode_json(body) if content_type == JSON else decode_msgpack(body)


def parse_addr(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6]:port``) into its parts; raises ValueError naming the address."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bad address {addr!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    p = int(port)
    if not 0 <= p <= 65535:
        raise ValueError(f"bad address {addr!r}: port out of range")
    return host, p

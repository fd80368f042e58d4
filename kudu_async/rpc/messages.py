"""Typed RPC messages and service declarations.

A request or response is a :class:`Message` (a frozen ``msgspec.Struct``): msgspec decodes a msgpack or
JSON body straight into it, checking every field's type and bounds in one pass in C, so a handler only sees
valid requests and a bad one is answered INVALID_ARGUMENT naming the field, what was expected and what
arrived. ``bytes``-like fields typed ``memoryview`` decode as views of the request body (no copy), which
is what the write path needs for its rows. Field names are the wire's map keys; a message encodes to the
same map a dict with those keys would.

A service declares its whole protocol in one table, ``{method name: Method(request type, response type,
handler)}``, and :func:`serve` registers it on an :class:`~kudu_async.rpc.server.RpcServer`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

import msgspec

from kudu_async.common.errors import KuduInvalidArgument, KuduInvalidRequest
from kudu_async.rpc import codec
from kudu_async.rpc.server import CallContext, RpcServer
from kudu_async.security.acl import Requires


class Message(msgspec.Struct, frozen=True):
    """Base of every RPC request and response. Unknown fields are ignored (newer callers may send more)."""


# Field types shared by the services' messages.
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
Unset = msgspec.UnsetType
UNSET = msgspec.UNSET


class Empty(Message, frozen=True):
    """A request or response without fields (``{}`` on the wire)."""


Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp")


@dataclass(frozen=True, slots=True)
class Method(Generic[Req, Resp]):
    """One method of a service: what it takes, what it answers (a message, or ``dict`` for an open status
    map whose keys are those of the node's admin pages), and the coroutine that serves it."""

    request: type[Req]
    response: type[Resp]
    handler: Callable[[Req, CallContext], Awaitable[Resp]]
    # Who may call it (``security/acl.py``): declared with the method, never defaulted.
    requires: Requires


ServiceTable = Mapping[str, "Method[Any, Any]"]

_AT = re.compile(r" - at `\$\.?(.*)`$")
_MISSING = re.compile(r"^Object missing required field `(.*)`$")
_EXPECTED = re.compile(r"^Expected `(.*?)`(.*)$")
_WORDS = {
    "str of length >= 1": "a non-empty string",
    "int >= 0": "a non-negative integer",
    "object": "a map",
    "array": "a list",
    "null": "null",
}


def _field_error(e: msgspec.ValidationError, prefix: str = "") -> KuduInvalidArgument:
    """msgspec's ``Expected `str`, got `int` - at `$.tablet_id``` as ``'tablet_id': expected str, got int``;
    ``prefix`` is the path of the decoded object inside its request."""
    text = str(e)
    path = ""
    at = _AT.search(text)
    if at is not None:
        path, text = at.group(1), text[: at.start()]
    if prefix:
        path = prefix + ("" if not path or path.startswith("[") else ".") + path
    missing = _MISSING.match(text)
    if missing is not None:
        field = f"{path}.{missing.group(1)}" if path else missing.group(1)
        return KuduInvalidArgument(f"'{field}': missing", {"field": field})
    expected = _EXPECTED.match(text)
    if expected is not None:
        want, rest = expected.group(1), expected.group(2)
        got = re.match(r"^, got `(.*)`$", rest)
        want_full = want + (rest if got is None else "")
        problem = f"expected {_WORDS.get(want_full.strip(), want_full.strip())}"
        if got is not None:
            problem += f", got {got.group(1)}"
    else:
        problem = text[:1].lower() + text[1:]
    return KuduInvalidArgument(f"'{path or 'request'}': {problem}", {"field": path or "request"})


_EMPTY_MAP = b"\x80"


class MessageCodec:
    """Decodes request bodies into one message type and encodes responses, in msgpack or JSON."""

    __slots__ = ("_json", "_msgpack", "response")

    def __init__(self, request: type[Message], response: type[Any]) -> None:
        self._msgpack = msgspec.msgpack.Decoder(request)
        self._json = msgspec.json.Decoder(request)
        self.response = response

    def decode(self, body: bytes, content_type: str) -> Any:
        """The validated request; an empty body is an empty map (``curl -X POST`` without ``-d``)."""
        try:
            if content_type == codec.JSON:
                return self._json.decode(body if body and not body.isspace() else b"{}")
            return self._msgpack.decode(body or _EMPTY_MAP)
        except msgspec.ValidationError as e:
            raise _field_error(e) from None
        except msgspec.DecodeError as e:
            kind = "JSON" if content_type == codec.JSON else "msgpack"
            raise KuduInvalidRequest(f"malformed {kind} body ({len(body)} bytes): {e}") from None

    def encode(self, obj: Any, content_type: str) -> bytes:
        """The response in the request's codec; a handler answering another type is a server bug."""
        if not isinstance(obj, self.response):
            raise TypeError(f"handler answered {type(obj).__name__}, its method declares {self.response.__name__}")
        if content_type == codec.JSON:
            return codec.encode_json(msgspec.to_builtins(obj))
        return _ENCODER.encode(obj)


_ENCODER = msgspec.msgpack.Encoder()


def decoder_for(request: type[Message]) -> Callable[[bytes], Any]:
    """A msgpack body -> validated ``request`` function (benchmarks, tests)."""
    mc = MessageCodec(request, Empty)
    return lambda body: mc.decode(body, codec.MSGPACK)


def convert(obj: Any, cls: type[Req], path: str = "") -> Req:
    """An already decoded map as a validated ``cls``; ``path`` names it inside its request, for errors."""
    try:
        return msgspec.convert(obj, cls)
    except msgspec.ValidationError as e:
        raise _field_error(e, path) from None


def to_builtins(msg: Any) -> Any:
    """A message as plain maps, lists and values (``bytes`` kept)."""
    return msgspec.to_builtins(msg, builtin_types=(bytes, bytearray, memoryview))


def serve(server: RpcServer, service: str, table: ServiceTable) -> None:
    """Register every method of ``service`` with its request type as the decoder of its bodies."""
    for name, m in table.items():
        server.register(service, name, m.handler, requires=m.requires, messages=MessageCodec(m.request, m.response))

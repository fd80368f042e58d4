"""jh2's ``H2Connection`` with two of its costs taken off the RPC hot path.

jh2 is h2's API and code (a maintained fork) with HPACK in compiled code, which cut the CPU per small RPC
by about 30% against h2 4.4 in ``scripts/bench/rpc.py``. This module is the only place that touches jh2's
private members; :func:`check_internals` lists what it relies on, and ``tests/unit/rpc/test_jh2_fast.py``
fails naming the member when a jh2 release changes one of them (pyproject.toml pins the tested range).

* Open streams: h2 counts them by scanning every stream it tracks (and drops closed ones while doing so)
  each time a stream opens, which is O(n) per call at high concurrency. While the number of tracked
  streams is below the relevant limit, that number is itself a valid upper bound for the check, so the
  scan (which also garbage-collects closed streams) only runs once the tracked set has doubled.
* Outgoing bytes: h2 copies a DATA frame's body three times before it reaches the socket (into the
  serialized frame, into its send buffer, out of it as ``bytes``). Here frames are queued as a list of
  chunks, a DATA frame as its 9-byte header plus the caller's body (a memoryview of the message, not
  copied), and :meth:`FastH2Connection.chunks_to_send` hands the list to ``transport.writelines``: the
  sender of 1 MiB bodies spends ~40% less CPU per MiB, a tserver under bulk load ~5% less.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import struct
from typing import Any

import jh2.config
import jh2.connection
import jh2.exceptions
from jh2.hyperframe.frame import DataFrame

# The jh2 releases whose internals were checked against this module (pyproject.toml pins the same).
TESTED_JH2 = ((5, 0, 15), (5, 0, 15))

_FRAME_HEADER = struct.Struct(">HBBBL")  # HTTP/2 frame header: 24-bit length, type, flags, stream id
_DATA_TYPE = 0x0
_END_STREAM = 0x1

Chunk = bytes | memoryview


class FastH2Connection(jh2.connection.H2Connection):
    """H2Connection whose send queue is a list of chunks and whose open-stream count is amortised."""

    _scan_at = 256
    _data_to_send: bytearray  # jh2's own send buffer (it still appends the preamble there)

    def __init__(self, config: jh2.config.H2Configuration) -> None:
        super().__init__(config=config)
        self._chunks: list[Chunk] = []

    def _prepare_for_sending(self, frames: list[Any]) -> None:
        if not frames:
            return
        self._take_buffered()
        chunks = self._chunks
        limit = self.max_outbound_frame_size
        for f in frames:
            if type(f) is DataFrame and "PADDED" not in f.flags:
                body = f.data
                n = f.body_len = len(body)
                end = _END_STREAM if "END_STREAM" in f.flags else 0
                chunks.append(
                    _FRAME_HEADER.pack((n >> 8) & 0xFFFF, n & 0xFF, _DATA_TYPE, end, f.stream_id & 0x7FFFFFFF)
                )
                if n:
                    chunks.append(body)
            else:
                chunks.append(f.serialize())
            if f.body_len > limit:
                raise jh2.exceptions.FrameTooLargeError(f"frame of {f.body_len} bytes over the peer's {limit}")

    def chunks_to_send(self) -> list[Chunk]:
        """Everything queued to send, in order, as separate chunks (nothing is joined or copied)."""
        self._take_buffered()
        out, self._chunks = self._chunks, []
        return out

    def _take_buffered(self) -> None:
        """Move bytes jh2 queued in its own buffer (the connection preamble) onto the chunk list, in order."""
        if self._data_to_send:
            self._chunks.append(bytes(self._data_to_send))
            self._data_to_send = bytearray()

    def data_to_send(self, amount: int | None = None) -> bytes:
        if amount is not None:
            raise NotImplementedError("data_to_send(amount) is not supported; use chunks_to_send()")
        return b"".join(self.chunks_to_send())

    def clear_outbound_data_buffer(self) -> None:
        self._chunks = []
        super().clear_outbound_data_buffer()

    def _open_streams(self, remainder: int) -> int:
        n = len(self.streams)
        outbound = remainder == (1 if self.config.client_side else 0)
        settings = self.remote_settings if outbound else self.local_settings
        if n < self._scan_at and n < settings.max_concurrent_streams:
            return n
        count: int = super()._open_streams(remainder)
        self._scan_at = max(256, 2 * len(self.streams))
        return count


def make_h2_connection(client_side: bool) -> FastH2Connection:
    """An H2Connection with validation and normalisation off: both ends are ours, headers are bytes."""
    cfg = jh2.config.H2Configuration(
        client_side=client_side,
        header_encoding=None,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        validate_inbound_headers=False,
        normalize_inbound_headers=False,
    )
    return FastH2Connection(cfg)


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def check_internals() -> list[str]:
    """What changed in jh2 that this module relies on; empty when everything is as tested."""
    return [*_check_overridden(), *_check_state(), *_check_data_frame()]


def _check_overridden() -> list[str]:
    """The private methods FastH2Connection overrides, and the public ones that must reach them."""
    problems: list[str] = []
    base = jh2.connection.H2Connection
    for name, params in (("_prepare_for_sending", ["self", "frames"]), ("_open_streams", ["self", "remainder"])):
        fn = getattr(base, name, None)
        if fn is None:
            problems.append(f"H2Connection.{name} is gone (FastH2Connection overrides it)")
        elif _params(fn) != params:
            problems.append(f"H2Connection.{name} now takes {_params(fn)}, FastH2Connection overrides {params}")
    for prop in ("open_outbound_streams", "open_inbound_streams"):
        getter = getattr(getattr(base, prop, None), "fget", None)
        if getter is None or "_open_streams(" not in inspect.getsource(getter):
            problems.append(f"H2Connection.{prop} no longer counts through _open_streams")
    for name in ("send_data", "send_headers", "reset_stream", "acknowledge_received_data"):
        if "_prepare_for_sending(" not in inspect.getsource(getattr(base, name)):
            problems.append(f"H2Connection.{name} no longer queues its frames through _prepare_for_sending")
    return problems


def _check_state() -> list[str]:
    """The attributes FastH2Connection reads or replaces on a connection."""
    problems: list[str] = []
    conn = jh2.connection.H2Connection(config=jh2.config.H2Configuration(client_side=True))
    for name, kind in (("_data_to_send", bytearray), ("streams", dict), ("_closed_streams", dict)):
        if not isinstance(getattr(conn, name, None), kind):
            problems.append(f"H2Connection().{name} is no longer a {kind.__name__}")
    conn.initiate_connection()
    if not bytes(getattr(conn, "_data_to_send", b"")).startswith(b"PRI * HTTP/2.0"):
        problems.append("initiate_connection() no longer queues the preamble in _data_to_send")
    problems += [
        f"H2Connection().{name} is gone"
        for name in ("max_outbound_frame_size", "remote_settings", "local_settings", "config")
        if not hasattr(conn, name)
    ]
    if not hasattr(getattr(conn, "remote_settings", None), "max_concurrent_streams"):
        problems.append("Settings.max_concurrent_streams is gone")
    return problems


def _check_data_frame() -> list[str]:
    """The DataFrame fields FastH2Connection serialises itself, and that it writes what jh2 would."""
    frame = DataFrame(3, b"abc", flags=["END_STREAM"])
    problems = [
        f"DataFrame.{name} is gone" for name in ("data", "flags", "stream_id", "body_len") if not hasattr(frame, name)
    ]
    fast = make_h2_connection(True)
    fast._chunks = []
    fast._data_to_send = bytearray()
    fast._prepare_for_sending([frame])
    if b"".join(bytes(c) for c in fast._chunks) != DataFrame(3, b"abc", flags=["END_STREAM"]).serialize():
        problems.append("DataFrame.serialize() no longer matches the frame header FastH2Connection writes")
    return problems


def jh2_version() -> tuple[int, ...]:
    """The installed jh2 release as a tuple of ints."""
    return tuple(int(p) for p in importlib.metadata.version("jh2").split(".")[:3])

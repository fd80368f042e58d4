"""The asyncio shell around one sans-IO HTTP/2 connection, shared by the server and the client side.

The state machine is ``jh2``: h2's API and code (a maintained fork) with HPACK in compiled code, which
cut the CPU per small RPC by about 30% against h2 4.4 in ``scripts/bench/rpc.py``, and without h2's
eager ``repr(frame)`` of every received frame. ``H2Connection`` turns bytes into events and queues the
bytes to send; this Protocol feeds it and does the I/O. Two things matter for throughput and correctness:

* Writes are coalesced: everything h2 queued while handling one ``data_received`` batch (and everything
  call completions queue within one loop iteration) goes out in one ``transport.writelines`` of chunks,
  DATA bodies as views of the caller's message (see ``_H2Connection``).
* Flow control is honoured in both directions. Outgoing bodies sit in a per-stream queue and are sent as
  the peer's stream and connection windows allow (resumed on WINDOW_UPDATE / SETTINGS, and on
  ``resume_writing`` when the socket buffer drained). Incoming DATA is acknowledged as soon as it is
  received (the RPC layer buffers whole bodies anyway, bounded by the max body size), with generous
  windows (16 MiB per stream and per connection) so a large upload never waits on a round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import Any, cast

import jh2.config
import jh2.connection
import jh2.errors
import jh2.events
import jh2.exceptions
import jh2.settings
from jh2.hyperframe.frame import DataFrame as _DataFrame

log = logging.getLogger("kudu_async.rpc")

DEFAULT_WINDOW = 16 * 1024 * 1024
DEFAULT_MAX_FRAME = 1024 * 1024
FLUSH_EVERY = 8
READ_BUFFER_MIN = 64 * 1024
READ_BUFFER_MAX = 1024 * 1024  # big DATA frames: h2's per-frame Python overhead dominates small ones
_H2_DEFAULT_WINDOW = 65535
_FRAME_HEADER = struct.Struct(">HBBBL")  # HTTP/2 frame header: 24-bit length, type, flags, stream id
_DATA_TYPE = 0x0
_END_STREAM = 0x1


class _Outbound:
    """The unsent part of one stream's body."""

    __slots__ = ("end", "offset", "view")

    def __init__(self, data: bytes, end: bool) -> None:
        self.view = memoryview(data)
        self.offset = 0
        self.end = end


class _H2Connection(jh2.connection.H2Connection):
    """H2Connection with two costs of h2 taken out of the hot path.

    Open streams: h2 counts them by scanning every stream it tracks (and drops closed ones while doing
    so) each time a stream opens, which is O(n) per call at high concurrency. While the number of
    tracked streams is below the relevant limit, that number is itself a valid upper bound for the check,
    so the scan (which also garbage-collects closed streams) only runs once the tracked set has doubled.

    Outgoing bytes: h2 copies a DATA frame's body three times before it reaches the socket (into the
    serialized frame, into its send buffer, out of it as ``bytes``). Here frames are queued as a list of
    chunks instead, a DATA frame as its 9-byte header plus the caller's body (a memoryview of the message,
    not copied), and :meth:`chunks_to_send` hands the list to ``transport.writelines``: the sender of 1 MiB
    bodies spends ~40% less CPU per MiB (``scripts/bench/rpc.py``), a tserver under bulk load ~5% less.
    """

    _scan_at = 256
    _data_to_send: bytearray  # h2's own send buffer (it still appends the preamble there)

    def __init__(self, config: jh2.config.H2Configuration) -> None:
        super().__init__(config=config)
        self._chunks: list[bytes | memoryview] = []

    def _prepare_for_sending(self, frames: list[Any]) -> None:
        if not frames:
            return
        self._take_buffered()
        chunks = self._chunks
        limit = self.max_outbound_frame_size
        for f in frames:
            if type(f) is _DataFrame and "PADDED" not in f.flags:
                body = f.data
                n = f.body_len = len(body)
                end = _END_STREAM if "END_STREAM" in f.flags else 0
                header = _FRAME_HEADER.pack((n >> 8) & 0xFFFF, n & 0xFF, _DATA_TYPE, end, f.stream_id & 0x7FFFFFFF)
                chunks.append(header)
                if n:
                    chunks.append(body)
            else:
                chunks.append(f.serialize())
            if f.body_len > limit:
                raise jh2.exceptions.FrameTooLargeError(f"frame of {f.body_len} bytes over the peer's {limit}")

    def chunks_to_send(self) -> list[bytes | memoryview]:
        """Everything queued to send, in order, as separate chunks (nothing is joined or copied)."""
        self._take_buffered()
        out, self._chunks = self._chunks, []
        return out

    def _take_buffered(self) -> None:
        """Move bytes h2 queued in its own buffer (the connection preamble) onto the chunk list, in order."""
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
        count = super()._open_streams(remainder)
        self._scan_at = max(256, 2 * len(self.streams))
        return count


def make_h2_connection(client_side: bool) -> _H2Connection:
    """An H2Connection with validation and normalisation off: both ends are ours, headers are bytes."""
    cfg = jh2.config.H2Configuration(
        client_side=client_side,
        header_encoding=None,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        validate_inbound_headers=False,
        normalize_inbound_headers=False,
    )
    return _H2Connection(cfg)


class H2Protocol(asyncio.BufferedProtocol):
    """Feeds bytes to h2, dispatches its events to ``on_<event>`` hooks, and writes what h2 queued."""

    def __init__(self, client_side: bool, max_concurrent_streams: int, window: int = DEFAULT_WINDOW) -> None:
        self.loop = asyncio.get_running_loop()
        self.conn = make_h2_connection(client_side)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._window = window
        self._max_streams = max_concurrent_streams
        self._flush_pending = False
        self._unflushed = 0
        self._write_paused = False
        self._outbound: dict[int, _Outbound] = {}
        self._rbuf = memoryview(bytearray(READ_BUFFER_MIN))
        self._dispatch: dict[type, Any] = {
            jh2.events.RequestReceived: self.on_request,
            jh2.events.ResponseReceived: self.on_response,
            jh2.events.DataReceived: self._on_data_received,
            jh2.events.StreamEnded: self.on_stream_ended,
            jh2.events.StreamReset: self.on_stream_reset,
            jh2.events.WindowUpdated: self._on_window_updated,
            jh2.events.RemoteSettingsChanged: self._on_remote_settings,
            jh2.events.ConnectionTerminated: self.on_terminated,
            jh2.events.TrailersReceived: self.on_trailers,
        }

    # --- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
        conn = self.conn
        # Our settings are installed as the *current* local values before the preface goes out rather
        # than sent later with update_settings(): h2 then enforces them (stream limit, frame size,
        # windows) from the first byte, instead of its defaults until the peer's ACK arrives.
        conn.local_settings = jh2.settings.Settings(
            client=conn.config.client_side,
            initial_values={
                jh2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self._max_streams,
                jh2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 1 << 16,
                jh2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self._window,
                jh2.settings.SettingCodes.MAX_FRAME_SIZE: DEFAULT_MAX_FRAME,
                jh2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        conn.max_inbound_frame_size = DEFAULT_MAX_FRAME
        conn.initiate_connection()
        if self._window > _H2_DEFAULT_WINDOW:
            conn.increment_flow_control_window(self._window - _H2_DEFAULT_WINDOW)
        self.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        # A BufferedProtocol: the loop reads straight into our buffer (no bytes object per read). The
        # buffer starts small and doubles (to 1 MiB) while reads fill it, so connections that carry big
        # bodies need few read syscalls and idle or chatty ones keep little memory.
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        buf = self._rbuf
        self.data_received(buf[:nbytes])
        if nbytes == len(buf) and nbytes < READ_BUFFER_MAX:
            self._rbuf = memoryview(bytearray(2 * nbytes))

    def data_received(self, data: bytes | memoryview) -> None:
        try:
            events = self.conn.receive_data(data)
        except jh2.exceptions.ProtocolError as e:
            log.warning("HTTP/2 protocol error from %s: %s; closing the connection", self.peer, e)
            self.flush()
            self.abort_connection(f"protocol error: {e}")
            return
        dispatch = self._dispatch
        for ev in events:
            handler = dispatch.get(type(ev))
            if handler is not None:
                handler(ev)
        self.flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._outbound:
            self._pump_all()
            self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._outbound.clear()
        self.on_connection_lost(exc)

    # --- sending ----------------------------------------------------------------------------------------

    def schedule_flush(self) -> None:
        """Write what h2 queued at the end of this loop iteration (coalesces many calls' frames).

        Every FLUSH_EVERY messages the batch goes out at once instead: the peer can start on the first
        answers while this side still works on the rest, so the two processes overlap rather than take
        turns (one write per iteration made each side idle half the time at high concurrency).
        """
        self._unflushed += 1
        if self._unflushed >= FLUSH_EVERY:
            self.flush()
        elif not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_pending = False
        self._unflushed = 0
        chunks = self.conn.chunks_to_send()
        if chunks and self.transport is not None and not self.closed:
            if len(chunks) == 1:
                self.transport.write(chunks[0])
            else:
                self.transport.writelines(chunks)

    def send_message(self, stream_id: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """Queue headers and a whole body on a stream (end_stream after the body); False if it is gone."""
        conn = self.conn
        try:
            if not body:
                conn.send_headers(stream_id, headers, end_stream=True)
                return True
            conn.send_headers(stream_id, headers)
        except (jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError):
            return False
        ob = _Outbound(body, True)
        self._outbound[stream_id] = ob
        if not self._write_paused:
            self._pump(stream_id, ob)
        return True

    def outbound_done(self, stream_id: int) -> bool:
        """True when the stream has no body bytes still waiting for flow-control window."""
        return stream_id not in self._outbound

    def _pump(self, stream_id: int, ob: _Outbound) -> None:
        conn = self.conn
        view = ob.view
        total = len(view)
        try:
            while True:
                remaining = total - ob.offset
                window = conn.local_flow_control_window(stream_id)
                if window <= 0:
                    return
                n = min(remaining, window, conn.max_outbound_frame_size)
                last = n == remaining
                start = ob.offset
                conn.send_data(stream_id, view[start : start + n], end_stream=last and ob.end)
                ob.offset = start + n
                if last:
                    del self._outbound[stream_id]
                    return
        except (jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError, KeyError):
            self._outbound.pop(stream_id, None)

    def _pump_all(self) -> None:
        for sid, ob in list(self._outbound.items()):
            if self._write_paused:
                return
            self._pump(sid, ob)

    def drop_outbound(self, stream_id: int) -> None:
        self._outbound.pop(stream_id, None)

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        self._outbound.pop(stream_id, None)
        with contextlib.suppress(jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError):
            self.conn.reset_stream(stream_id, error_code)
        self.schedule_flush()

    def close_connection(self) -> None:
        """Final GOAWAY through h2, flush, close the socket."""
        if self.transport is None or self.closed:
            return
        with contextlib.suppress(jh2.exceptions.ProtocolError):
            self.conn.close_connection()
        self.flush()
        self.transport.close()

    def abort_connection(self, reason: str) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()

    # --- events -----------------------------------------------------------------------------------------

    def _on_data_received(self, ev: jh2.events.DataReceived) -> None:
        # Hand the window back at once: bodies are buffered whole (bounded by the max body size), and
        # waiting for the application would stall large uploads for a round trip per window.
        n = ev.flow_controlled_length
        if n:
            with contextlib.suppress(jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError):
                self.conn.acknowledge_received_data(n, ev.stream_id)
        self.on_data(ev)

    def _on_window_updated(self, ev: jh2.events.WindowUpdated) -> None:
        if not self._outbound or self._write_paused:
            return
        sid = ev.stream_id
        if sid:
            ob = self._outbound.get(sid)
            if ob is not None:
                self._pump(sid, ob)
        else:
            self._pump_all()

    def _on_remote_settings(self, ev: jh2.events.RemoteSettingsChanged) -> None:
        if self._outbound and not self._write_paused:
            self._pump_all()
        self.on_settings_changed()

    # Hooks for the two sides; the defaults ignore the event.

    def on_request(self, ev: jh2.events.RequestReceived) -> None:
        self.reset_stream(ev.stream_id, jh2.errors.ErrorCodes.REFUSED_STREAM)

    def on_response(self, ev: jh2.events.ResponseReceived) -> None:
        pass

    def on_data(self, ev: jh2.events.DataReceived) -> None:
        pass

    def on_trailers(self, ev: jh2.events.TrailersReceived) -> None:
        pass

    def on_stream_ended(self, ev: jh2.events.StreamEnded) -> None:
        pass

    def on_stream_reset(self, ev: jh2.events.StreamReset) -> None:
        self._outbound.pop(ev.stream_id, None)

    def on_terminated(self, ev: jh2.events.ConnectionTerminated) -> None:
        pass

    def on_settings_changed(self) -> None:
        pass

    def on_connection_lost(self, exc: Exception | None) -> None:
        pass

"""The asyncio shell shared by both ends: moves bytes between a socket and a sans-IO RPC connection.

Reads go straight into a growing buffer (``asyncio.BufferedProtocol``); writes are coalesced: everything
the connection queued while handling one read (and everything call completions queue within one loop
iteration) goes out in one ``transport.writelines`` of chunks, DATA bodies as views of the message.
"""

from __future__ import annotations

import asyncio
from typing import cast

from kudu_async.rpc.connection import ClientConnection, ServerConnection

FLUSH_EVERY = 8
READ_BUFFER_MIN = 64 * 1024
READ_BUFFER_MAX = 1024 * 1024  # big DATA frames: h2's per-frame Python overhead dominates small ones


def peer_name(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
    return "?"


class RpcProtocol(asyncio.BufferedProtocol):
    """Socket I/O for one connection object (``rpc``); the two sides feed it received bytes themselves."""

    def __init__(self, rpc: ServerConnection | ClientConnection) -> None:
        self.loop = asyncio.get_running_loop()
        self.rpc = rpc
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.lost = False
        self._flush_pending = False
        self._unflushed = 0
        self._rbuf = memoryview(bytearray(READ_BUFFER_MIN))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        self.peer = peer_name(transport)
        self.rpc.initiate()
        self.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        # The loop reads straight into our buffer (no bytes object per read). The buffer starts small and
        # doubles (to 1 MiB) while reads fill it, so connections that carry big bodies need few read
        # syscalls and idle or chatty ones keep little memory.
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        buf = self._rbuf
        self.data_received(buf[:nbytes])
        if nbytes == len(buf) and nbytes < READ_BUFFER_MAX:
            self._rbuf = memoryview(bytearray(2 * nbytes))

    def data_received(self, data: bytes | memoryview) -> None:
        raise NotImplementedError

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def pause_writing(self) -> None:
        self.rpc.pause_writing()

    def resume_writing(self) -> None:
        self.rpc.resume_writing()
        self.flush()

    def schedule_flush(self) -> None:
        """Write what the connection queued at the end of this loop iteration (coalesces many calls' frames).

        Every FLUSH_EVERY messages the batch goes out at once instead: the peer can start on the first
        answers while this side still works on the rest, so the two processes overlap rather than take
        turns (one write per iteration made each side idle half the time at high concurrency).
        """
        if self.rpc.closed:
            self.flush()
            return
        self._unflushed += 1
        if self._unflushed >= FLUSH_EVERY:
            self.flush()
        elif not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what the connection queued; close the transport after its GOAWAY."""
        self._flush_pending = False
        self._unflushed = 0
        chunks = self.rpc.chunks_to_send()
        transport = self.transport
        if transport is None or self.lost:
            return
        if chunks:
            if len(chunks) == 1:
                transport.write(chunks[0])
            else:
                transport.writelines(chunks)
        if self.rpc.closed:
            transport.close()

    def close_connection(self) -> None:
        """Final GOAWAY, flush, close the socket."""
        if self.transport is None or self.lost:
            return
        self.rpc.close()
        self.flush()

    def abort_connection(self) -> None:
        if self.transport is not None and not self.lost:
            self.transport.abort()

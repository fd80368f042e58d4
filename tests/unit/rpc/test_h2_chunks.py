"""The HTTP/2 connection's send queue: frames leave as chunks in order, a DATA frame's body is the caller's
memory (not a copy), and a peer parses the concatenated chunks back into the same request."""

from __future__ import annotations

import jh2.events

from kudu_async.rpc.jh2_fast import make_h2_connection


def test_data_frames_are_queued_without_copying_the_body_and_parse_back() -> None:
    client, server = make_h2_connection(True), make_h2_connection(False)
    client.initiate_connection()
    server.initiate_connection()
    first = client.chunks_to_send()
    assert first and bytes(first[0]).startswith(b"PRI * HTTP/2.0")  # h2's own preamble goes first
    server.receive_data(b"".join(bytes(c) for c in first))
    client.receive_data(server.data_to_send())

    body = bytes(range(256)) * 200  # 51,200 bytes: several DATA frames of the peer's 16 KiB default
    view = memoryview(body)
    sid = client.get_next_available_stream_id()
    client.send_headers(sid, [(b":method", b"POST"), (b":path", b"/x"), (b":scheme", b"http"), (b":authority", b"a")])
    sent = 0
    while sent < len(body):
        n = min(len(body) - sent, client.max_outbound_frame_size, client.local_flow_control_window(sid))
        client.send_data(sid, view[sent : sent + n], end_stream=sent + n == len(body))
        sent += n
    chunks = client.chunks_to_send()
    bodies = [c for c in chunks if isinstance(c, memoryview)]
    assert bodies and all(c.obj is body for c in bodies)  # views of the caller's bytes, never copied
    assert sum(len(c) for c in bodies) == len(body)
    assert client.chunks_to_send() == []  # taken once

    got = bytearray()
    ended = False
    for ev in server.receive_data(b"".join(bytes(c) for c in chunks)):
        if isinstance(ev, jh2.events.DataReceived):
            assert ev.data is not None
            got += ev.data
        ended = ended or isinstance(ev, jh2.events.StreamEnded)
    assert bytes(got) == body and ended
    assert client.data_to_send() == b""  # the joined form stays available for plain callers

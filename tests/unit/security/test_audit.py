"""The audit log: JSON lines written off the loop, rotated at a size, dropped (counted) when the writer lags."""

from __future__ import annotations

import json
from pathlib import Path

from kudu_async.security.audit import AuditLog, audit_line
from kudu_async.security.identity import Identity


def test_lines_have_every_field(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "logs" / "audit.log")
    log.record(
        audit_line(
            identity=Identity("alice", "jwt"),
            client="127.0.0.1:5555",
            method="Master/DeleteTable",
            obj="default.t",
            allowed=False,
            reason="requires DROP",
            now=0.25,
        )
    )
    log.record(audit_line(identity=Identity("bob"), client="c", method="Master/CreateTable", obj="db.t", allowed=True))
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "logs" / "audit.log").read_text().splitlines()]
    assert lines[0] == {
        "time": "1970-01-01T00:00:00.250Z",
        "user": "alice",
        "authn": "jwt",
        "client": "127.0.0.1:5555",
        "method": "Master/DeleteTable",
        "object": "default.t",
        "allowed": False,
        "reason": "requires DROP",
    }
    assert (lines[1]["user"], lines[1]["authn"], lines[1]["allowed"]) == ("bob", "none", True)
    # Closed: further lines are ignored, not an error.
    log.record(lines[0])


def test_rotation_bounds_the_disk(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path, max_bytes=2000, backups=2)
    line = audit_line(identity=Identity("u" * 100), client="c", method="M/m", obj="o", allowed=False, reason="r" * 50)
    for _ in range(200):
        log.record(line)
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all(p.stat().st_size <= 2000 for p in tmp_path.iterdir())


def test_a_full_queue_drops_and_counts(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log", queue_size=1)
    log._listener.stop()  # the writer stalls: the queue fills
    line = audit_line(identity=Identity("u"), client="c", method="M/m", obj="o", allowed=True)
    for _ in range(5):
        log.record(line)
    assert log.dropped == 4
    log._listener.start()
    log.close()
    assert len((tmp_path / "audit.log").read_text().splitlines()) == 1

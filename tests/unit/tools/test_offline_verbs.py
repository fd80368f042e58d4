"""The kudu tool's offline verbs (``wal dump``, ``local_replica``, ``fs``) and the readers under them, on a
tablet server data directory written by the real writers: a Tablet with flushed rowsets and a REDO delta,
a Log with the entries a replica appends, consensus metadata and the instance file. Damage is reported as
CORRUPTION naming the file (and the offset, in a WAL) with exit status 1, never a traceback; a directory
a live process holds is refused, naming the process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.errors import KuduCorruption
from kudu_async.common.row_conversion import OpType
from kudu_async.common.schema import Schema
from kudu_async.consensus.consensus_meta import ConsensusMetadata
from kudu_async.consensus.log import Log, LogEntry, LogOptions, SegmentReader, wal_segment_paths
from kudu_async.consensus.raft_messages import Config, EntryKind
from kudu_async.fs.fs_manager import FsManager
from kudu_async.tablet.ops import WriteOp
from kudu_async.tablet.tablet import Tablet, TabletOptions
from kudu_async.tools.cli import main
from kudu_async.tserver.local_replicas import LocalDataDir
from kudu_async.tserver.wire import encode_write_entry

FIELDS = [pa.field("k", pa.int64(), False), pa.field("v", pa.string())]
TABLET = "a" * 32
PEERS = {"ts-a": "127.0.0.1:7050", "ts-b": "127.0.0.1:7060", "ts-c": "127.0.0.1:7070"}


@dataclass
class Node:
    root: Path
    uuid: str
    wal: Path
    tablet_dir: Path


def _batch(keys: list[int], vals: list[str | None]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(keys, pa.int64()), pa.array(vals, pa.string())], schema=pa.schema(FIELDS))


def _make_node(root: Path, *, segment_bytes: int = 4096) -> Node:
    """A tserver data directory as a node leaves it: rows written through the tablet and logged in the
    WAL the way a replica logs them (a no-op, writes, a config change adding a learner, committed)."""
    uuid = FsManager(root, "tserver").open_or_create().uuid
    schema = Schema.from_arrow(pa.schema(FIELDS), num_key_columns=1).with_column_ids()
    tdir = root / "tablets" / TABLET
    clock = ManualHybridClock()
    t = Tablet.create(str(tdir), schema, tablet_id=TABLET, options=TabletOptions(sync=False), clock=clock)
    entries = [LogEntry(1, 1, int(EntryKind.NOOP), b"")]
    index = 1
    for lo in range(0, 300, 100):
        index += 1
        keys = list(range(lo, lo + 100))
        op = WriteOp([OpType.INSERT] * 100, _batch(keys, [f"v{k}" for k in keys]))
        ts = clock.now()
        assert t.write(op, ts, index).row_errors == []
        entries.append(LogEntry(1, index, int(EntryKind.NORMAL), encode_write_entry(ts, 0, op)))
    t.flush_mrs()
    index += 1
    upd = WriteOp([OpType.UPDATE, OpType.DELETE], _batch([5, 6], ["five", None]))
    ts = clock.now()
    assert t.write(upd, ts, index).row_errors == []
    entries.append(LogEntry(1, index, int(EntryKind.NORMAL), encode_write_entry(ts, 0, upd)))
    t.flush_all()  # the update and delete land in a REDO delta block
    grown = Config(frozenset({"ts-a", "ts-b", "ts-c"}), frozenset({"ts-d"}))
    index += 1
    entries.append(LogEntry(1, index, int(EntryKind.CONFIG), grown.encode({**PEERS, "ts-d": "127.0.0.1:7080"})))
    wal_dir = root / "consensus" / TABLET / "wal"
    log, _ = Log.open(wal_dir, LogOptions(segment_bytes=segment_bytes, fsync=False, compression="LZ4"))
    for e in entries:
        log.append([e])
    log.close()
    voters = Config(frozenset(PEERS))
    extra = {"table_id": "t1", "table_name": "kv", "partition": {"hash_buckets": [0]}, "kind": "tablet"}
    ConsensusMetadata(1, "ts-a", index, {"peers": PEERS, "snapshot": [0, 0, voters.to_dict()], "extra": extra}).save(
        root / "consensus" / TABLET / "cmeta"
    )
    return Node(root, uuid, wal_dir, tdir)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return _make_node(tmp_path / "ts")


def kudu(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# --- the segment reader and wal dump ------------------------------------------------------------------------


def test_segment_reader_reads_what_the_log_wrote(node: Node) -> None:
    paths = wal_segment_paths(node.wal)
    assert len(paths) > 1  # small segments: the log rolled
    seen = []
    for n, p in enumerate(paths):
        seg = SegmentReader(p, is_last=n == len(paths) - 1)
        assert seg.seqno == n + 1
        seen += [(e.index, e.kind) for f in seg.frames() for e in f.entries]
        assert seg.torn_tail is None
    assert [i for i, _ in seen] == list(range(1, 7))
    assert seen[0][1] == EntryKind.NOOP and seen[-1][1] == EntryKind.CONFIG


def test_damage_mid_log_is_corruption_naming_file_and_offset(node: Node) -> None:
    first = wal_segment_paths(node.wal)[0]
    frames = list(SegmentReader(first, is_last=False).frames())
    _flip(first, frames[0].offset + 14)  # inside the first frame's payload (a no-op: 7 bytes after 12 of header)
    with pytest.raises(KuduCorruption, match=rf"{first} is corrupt at offset {frames[0].offset}: checksum mismatch"):
        list(SegmentReader(first, is_last=False).frames())


def test_torn_tail_of_the_newest_segment_is_reported_not_raised(node: Node) -> None:
    last = wal_segment_paths(node.wal)[-1]
    frames = list(SegmentReader(last).frames())
    size = last.stat().st_size
    os.truncate(last, size - 3)  # a write cut short by a crash
    seg = SegmentReader(last)
    assert len(list(seg.frames())) == len(frames) - 1
    assert seg.torn_tail == (frames[-1].offset, "incomplete frame")
    with pytest.raises(KuduCorruption, match="incomplete frame"):
        list(SegmentReader(last, is_last=False).frames())


def test_wal_dump_prints_header_entries_and_summary(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    paths = wal_segment_paths(node.wal)
    code, out, err = kudu(capsys, "wal", "dump", str(paths[0]))
    assert code == 0, err
    assert "Header:" in out and "sequence number: 1" in out and "Footer:" in out
    assert "1.1\tREPLICATE NO_OP" in out
    assert "REPLICATE WRITE_OP" in out and "op 0: INSERT (k=0, v='v0')" in out
    code, out, _ = kudu(capsys, "wal", "dump", str(paths[-1]), "-print_entries=id", "-print_meta=false")
    assert code == 0
    assert out.strip().splitlines()[-1] == "1.6\tREPLICATE CHANGE_CONFIG_OP"
    code, out, _ = kudu(capsys, "wal", "dump", str(paths[-1]), "-print_entries=decoded", "-print_meta=false")
    assert "non-voters: ts-d" in out and "ts-a(127.0.0.1:7050)" in out
    code, out, _ = kudu(capsys, "wal", "dump", str(paths[0]), "-print_entries=pb", "-truncate_data=8")
    assert "Entry:" in out and "more>" in out


def test_wal_dump_of_a_damaged_segment_exits_1_naming_file_and_offset(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    first = wal_segment_paths(node.wal)[0]
    frames = list(SegmentReader(first, is_last=False).frames())
    _flip(first, frames[0].offset + 5)  # the first frame's header checksum no longer matches; frames follow it
    code, out, err = kudu(capsys, "wal", "dump", str(first))
    assert code == 1
    assert f"CORRUPTION: WAL segment {first} is corrupt at offset {frames[0].offset}" in err
    assert "frame header checksum mismatch" in err and "Traceback" not in err
    assert "Header:" in out  # what came before the damage was printed
    code, _, err = kudu(capsys, "wal", "dump", str(first.parent / "wal-000000099"))
    assert code == 1 and "cannot read WAL segment" in err
    code, _, err = kudu(capsys, "wal", "dump", str(first), "-print_entries=maybe")
    assert code == 1 and "-print_entries: unknown value 'maybe'" in err


# --- local_replica ------------------------------------------------------------------------------------------


def test_local_replica_list_dump_and_cmeta(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    fs = f"-fs_wal_dir={node.root}"
    code, out, err = kudu(capsys, "local_replica", "list", fs)
    assert (code, out) == (0, f"{TABLET}\n"), err
    code, out, _ = kudu(capsys, "local_replica", "list", fs, "-list_detail", "-format=json")
    [row] = json.loads(out)
    assert row["table_name"] == "kv" and row["state"] == "READY" and row["term"] == 1 and row["rowsets"] >= 1
    code, out, _ = kudu(capsys, "local_replica", "dump", "block_ids", TABLET, fs)
    assert code == 0 and "Base data block:" in out and "REDO delta block:" in out
    code, out, _ = kudu(capsys, "local_replica", "dump", "meta", TABLET, fs)
    doc = json.loads(out)
    assert doc["consensus_metadata"]["current_term"] == 1
    assert doc["committed_config"]["learners"] == ["ts-d"] and doc["committed_config"]["opid_index"] == 6
    assert doc["tablet_metadata"]["tablet_id"] == TABLET
    code, out, _ = kudu(capsys, "local_replica", "dump", "rowset", TABLET, fs, "-dump_metadata=false")
    lines = out.splitlines()
    assert len(lines) == 299  # key 6 deleted
    assert "(int64 k=5, string v='five')" in lines and not any("k=6," in ln for ln in lines)
    code, out, _ = kudu(capsys, "local_replica", "dump", "rowset", TABLET, fs, "-nrows=3", "-dump_metadata=false")
    assert out.splitlines() == [f"(int64 k={k}, string v='v{k}')" for k in range(3)]
    code, out, _ = kudu(capsys, "local_replica", "dump", "wals", TABLET, fs, "-print_entries=id", "-print_meta=0")
    assert [ln.split("\t")[0].split("@")[0] for ln in out.splitlines()] == [f"1.{i}" for i in range(1, 7)]
    code, out, _ = kudu(capsys, "local_replica", "dump", "data_dirs", TABLET, fs)
    assert out.strip() == str(node.tablet_dir / "data")
    code, out, _ = kudu(capsys, "local_replica", "cmeta", "print_replica_uuids", TABLET, fs)
    assert out.strip() == f"tablet: {TABLET}, peers: ts-a ts-b ts-c ts-d"
    code, out, err = kudu(capsys, "local_replica", "data_size", "a*", fs, "-format=json")
    sizes = json.loads(out)
    assert code == 0 and sizes[0]["wal_bytes"] > 0 and sizes[0]["data_bytes"] > 0, err


def test_cmeta_set_term_raises_the_term_and_keeps_the_old_record(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    fs = f"-fs_wal_dir={node.root}"
    code, _, err = kudu(capsys, "local_replica", "cmeta", "set_term", TABLET, "1", fs)
    assert code == 1 and "specified term 1 must be higher than current term 1" in err
    code, out, err = kudu(capsys, "local_replica", "cmeta", "set_term", TABLET, "7", fs)
    assert code == 0 and "term 1 -> 7" in out, err
    cm = ConsensusMetadata.load(node.root / "consensus" / TABLET / "cmeta")
    assert cm is not None and (cm.term, cm.voted_for, cm.commit_index) == (7, None, 6)
    [backup] = (node.root / "consensus" / TABLET).glob("cmeta.pre_rewrite.*")
    assert ConsensusMetadata.from_bytes(backup.read_bytes()).term == 1
    code, _, err = kudu(capsys, "local_replica", "cmeta", "set_term", TABLET, "x", fs)
    assert code == 1 and "invalid term 'x'" in err


def test_local_replica_delete_tombstones_or_cleans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = _make_node(tmp_path / "one")
    code, out, err = kudu(capsys, "local_replica", "delete", "a*", f"-fs_wal_dir={n.root}")
    assert code == 0 and "tombstoned" in out, err
    cdir = n.root / "consensus" / TABLET
    assert (cdir / "TOMBSTONED").exists() and (cdir / "cmeta").exists() and not (cdir / "wal").exists()
    assert not n.tablet_dir.exists()
    code, out, _ = kudu(capsys, "local_replica", "list", f"-fs_wal_dir={n.root}", "-list_detail", "-format=json")
    assert json.loads(out)[0]["state"] == "TOMBSTONED"
    code, _, err = kudu(capsys, "local_replica", "delete", "zzz", f"-fs_wal_dir={n.root}")
    assert code == 1 and "matches no replica" in err
    assert kudu(capsys, "local_replica", "delete", "zzz", f"-fs_wal_dir={n.root}", "-ignore_nonexistent")[0] == 0
    m = _make_node(tmp_path / "two")
    code, _, _ = kudu(capsys, "local_replica", "delete", TABLET, f"-fs_data_dirs={m.root}", "-clean_unsafe")
    assert code == 0 and not (m.root / "consensus" / TABLET).exists() and not m.tablet_dir.exists()


# --- fs -----------------------------------------------------------------------------------------------------


def test_fs_check_clean_orphans_repair_and_damage(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    fs = f"-fs_wal_dir={node.root}"
    code, out, err = kudu(capsys, "fs", "check", fs)
    assert code == 0, out + err
    assert f"uuid: {node.uuid} (tserver)" in out and "Total orphaned blocks: 0" in out
    blocks = node.tablet_dir / "data"
    (blocks / "0-deadbeef0000-00000001.blk").write_bytes(b"left by a crash")
    (blocks / "0-deadbeef0000-00000002.blk.tmp").write_bytes(b"half written")
    code, out, _ = kudu(capsys, "fs", "check", fs)
    assert code == 1 and "Total orphaned blocks: 1 (15 bytes)" in out and "0-deadbeef0000-00000001" in out
    assert "Total temporary files: 1" in out
    code, out, _ = kudu(capsys, "fs", "check", fs, "-repair")
    assert code == 0 and "removed orphaned block 0-deadbeef0000-00000001" in out
    assert sorted(p.name for p in blocks.iterdir() if "deadbeef" in p.name) == []
    meta = LocalDataDir.open(node.root, "test", lock=False).replica(TABLET).meta
    assert meta is not None
    base = blocks / f"{meta.rowsets[0].base_block}.blk"
    chunk = pq.ParquetFile(base).metadata.row_group(0).column(0)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    _flip(base, start + chunk.total_compressed_size - 1)  # the last byte of the chunk's last page's data
    code, out, err = kudu(capsys, "fs", "check", fs)
    assert code == 1 and f"base block {meta.rowsets[0].base_block}: row group 0 at offset" in out
    assert "CORRUPTION" in out and "Traceback" not in err
    (blocks / f"{meta.rowsets[0].bloom_block}.blk").unlink()
    code, out, _ = kudu(capsys, "fs", "check", fs)
    assert code == 1 and f"bloom block {meta.rowsets[0].bloom_block} is missing" in out


def test_fs_check_reports_wal_corruption(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    first = wal_segment_paths(node.wal)[0]
    frames = list(SegmentReader(first, is_last=False).frames())
    _flip(first, frames[0].offset + 14)
    code, out, _ = kudu(capsys, "fs", "check", f"-fs_wal_dir={node.root}")
    assert code == 1 and f"WAL segment {first} is corrupt at offset {frames[0].offset}" in out


def test_fs_list_and_dump_uuid(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    fs = f"-fs_wal_dir={node.root}"
    code, out, err = kudu(capsys, "fs", "dump", "uuid", fs)
    assert (code, out.strip()) == (0, node.uuid), err
    code, out, _ = kudu(capsys, "fs", "list", fs, "-format=json")
    rows = json.loads(out)
    assert {r["block-kind"] for r in rows} == {"base", "bloom", "delta"}
    assert {r["tablet-id"] for r in rows} == {TABLET}
    code, out, _ = kudu(capsys, "fs", "list", fs, "-columns=table,tablet-id,partition", "-format=json")
    assert json.loads(out) == [
        {"table": "kv", "tablet-id": TABLET, "partition": "HASH BUCKETS [0] KEYS [<start>, <end>)"}
    ]
    code, out, _ = kudu(
        capsys, "fs", "list", fs, "-columns=block-id,cfile-size,cfile-num-values", "--h=false", "-format=json"
    )
    base = [r for r in json.loads(out) if r["cfile-num-values"] is not None]
    assert base and all(isinstance(r["cfile-size"], int) for r in base)
    code, _, err = kudu(capsys, "fs", "list", fs, "-columns=cfile-encoding")
    assert code == 1 and "unknown field(s) cfile-encoding" in err


# --- the directory and its lock -----------------------------------------------------------------------------


def test_fs_flags_name_one_directory(node: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = kudu(capsys, "fs", "dump", "uuid")
    assert code == 1 and "-fs_wal_dir is required" in err
    code, _, err = kudu(capsys, "fs", "dump", "uuid", f"-fs_wal_dir={node.root}", f"-fs_data_dirs={tmp_path}")
    assert code == 1 and "one --data-dir; these differ" in err
    code, out, _ = kudu(capsys, "fs", "dump", "uuid", f"-fs_wal_dir={node.root}", f"-fs_data_dirs={node.root}")
    assert code == 0 and out.strip() == node.uuid
    code, _, err = kudu(capsys, "fs", "dump", "uuid", f"-fs_wal_dir={tmp_path}")
    assert code == 1 and "holds no instance file" in err


def test_a_directory_another_process_holds_is_refused(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from kudu_async.fs.fs_manager import FsManager\n"
            "FsManager(sys.argv[1], 'tserver').open_or_create(lock=True)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
            str(node.root),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],  # this checkout's kudu_async
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        code, _, err = kudu(capsys, "local_replica", "list", f"-fs_wal_dir={node.root}")
        assert code == 1 and f"is in use: process {holder.pid} (tserver) holds" in err
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the kernel drops a dead process's lock
        code, _, _ = kudu(capsys, "local_replica", "list", f"-fs_wal_dir={node.root}")
        if code == 0:
            break
        time.sleep(0.05)
    assert code == 0


def test_damaged_files_are_corruption_naming_them(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    fs = f"-fs_wal_dir={node.root}"
    meta = LocalDataDir.open(node.root, "test", lock=False).replica(TABLET).meta
    assert meta is not None
    base = node.tablet_dir / "data" / f"{meta.rowsets[0].base_block}.blk"
    chunk = pq.ParquetFile(base).metadata.row_group(0).column(0)
    _flip(base, chunk.data_page_offset + chunk.total_compressed_size - 1)
    code, _, err = kudu(capsys, "local_replica", "dump", "rowset", TABLET, fs)
    assert code == 1 and f"CORRUPTION: cannot read block {base}" in err and "Traceback" not in err
    (node.tablet_dir / "tablet-meta.json").write_text("garbage")
    code, out, _ = kudu(capsys, "local_replica", "list", fs, "-list_detail", "-format=json")
    [row] = json.loads(out)
    assert row["state"] == "FAILED" and "tablet-meta.json: tablet metadata unreadable" in row["error"]
    code, _, err = kudu(capsys, "local_replica", "dump", "block_ids", TABLET, fs)
    assert code == 1 and f"CORRUPTION: tablet {TABLET}: {node.tablet_dir / 'tablet-meta.json'}" in err
    (node.root / "consensus" / TABLET / "cmeta").write_bytes(b"kcmeta1\n\0\0\0\0garbage")
    code, out, _ = kudu(capsys, "fs", "check", fs)
    assert code == 1 and "consensus metadata: " in out and "checksum mismatch" in out
    assert "tablet metadata unreadable" in out


def test_fs_locate_block_and_dump_tree(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    fs = f"-fs_wal_dir={node.root}"
    meta = LocalDataDir.open(node.root, "test", lock=False).replica(TABLET).meta
    assert meta is not None
    block = meta.rowsets[0].base_block
    path = node.tablet_dir / "data" / f"{block}.blk"
    code, out, err = kudu(capsys, "fs", "locate_block", f"{block},0-nothing-00000001", fs)
    assert code == 1, err
    assert out.splitlines() == [f"{block}\ttablet {TABLET}\t{path}", "0-nothing-00000001\tnot found"]
    code, out, _ = kudu(capsys, "fs", "dump", "tree", fs)
    assert code == 0 and out.startswith(f"{node.root}/\n") and f"      {block}.blk ({path.stat().st_size} bytes)" in out


def test_fs_dump_block_writes_the_file_as_is(node: Node, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    meta = LocalDataDir.open(node.root, "test", lock=False).replica(TABLET).meta
    assert meta is not None
    path = node.tablet_dir / "data" / f"{meta.rowsets[0].bloom_block}.blk"
    assert main(["fs", "dump", "block", meta.rowsets[0].bloom_block, f"-fs_wal_dir={node.root}"]) == 0
    assert capsysbinary.readouterr().out == path.read_bytes()


def test_fs_check_removes_a_killed_nodes_unfinished_tablet_copy(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    fs = f"-fs_wal_dir={node.root}"
    staging = node.root / "copy-staging" / f"{'b' * 32}.1795772582849"
    (staging / "tablet").mkdir(parents=True)
    (staging / "tablet" / "tablet-meta.json").write_text("{}")
    code, out, _ = kudu(capsys, "fs", "check", fs)
    assert code == 1 and "Total unfinished tablet copies: 1, 0 repaired" in out and str(staging) in out
    code, out, _ = kudu(capsys, "fs", "check", fs, "-repair")
    assert code == 0 and f"removed unfinished tablet copy {staging}" in out and not staging.exists()

#!/usr/bin/env python3
"""A program written for kudu-python, run unchanged with ``import kudu_async as kudu``.

It creates a table with a non-unique primary key, writes rows whose timestamps are strings (ISO and
``(string, format)``, as kudu-python takes them), scans a key range given by bounds with ``xbatches``,
soft-deletes the table and recalls it. It checks what it reads and exits non-zero on a mismatch.

    python scripts/examples/kudu_python_demo.py --master 127.0.0.1:7051
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kudu_async as kudu
from kudu_async.client import Partitioning


def run(master: str, table_name: str) -> None:
    hosts, ports = zip(*(a.rsplit(":", 1) for a in master.split(",")), strict=True)
    client = kudu.connect(host=list(hosts), port=[int(p) for p in ports])

    builder = kudu.schema_builder()
    builder.add_column("sensor").type(kudu.int32).nullable(False).non_unique_primary_key()
    builder.add_column("ts", type_=kudu.unixtime_micros, nullable=False)
    builder.add_column("reading", type_=kudu.double)
    schema = builder.build()
    print("schema:", schema.names, "hidden key column:", schema.get_auto_incrementing_column_name())
    partitioning = Partitioning().add_hash_partitions(column_names=["sensor"], num_buckets=3)
    if client.table_exists(table_name):
        client.delete_table(table_name)
    client.create_table(table_name, schema, partitioning)
    table = client.table(table_name)

    session = client.new_session()
    for i in range(40):  # four sensors, ten readings each: the key repeats
        stamp = f"2024-01-{1 + i // 4:02d}T12:00:{i % 60:02d}.000250"
        session.apply(table.new_insert({"sensor": i % 4, "ts": stamp, "reading": i * 0.5}))
    op = table.new_insert()
    op["sensor"] = 2
    op["ts"] = ("2024-02-01", "%Y-%m-%d")
    op["reading"] = 99.0
    session.apply(op)
    session.flush()

    scanner = table.scanner()
    # A bound sets every key column, the hidden one too (as Kudu asks): ids start at 1, so 0 is below all.
    auto_id = schema.get_auto_incrementing_column_name()
    lower = scanner.new_bound()
    lower["sensor"] = 1
    lower[auto_id] = 0
    upper = scanner.new_bound()
    upper["sensor"] = 3
    upper[auto_id] = 0
    scanner.add_lower_bound(lower).add_exclusive_upper_bound(upper)
    scanner.set_projected_column_names(["sensor", "ts", "reading"])
    rows = []
    for batch in scanner.xbatches():
        rows.extend(batch)
    print("rows with 1 <= sensor < 3:", len(rows), "server cost:", scanner.get_resource_metrics())
    sensors = sorted({r[0] for r in rows})
    if sensors != [1, 2] or len(rows) != 21:
        raise SystemExit(f"bounded scan read sensors {sensors}, {len(rows)} rows; expected [1, 2], 21 rows")
    feb = [r for r in rows if r[1] == datetime.datetime(2024, 2, 1, tzinfo=datetime.UTC)]
    if [r[2] for r in feb] != [99.0]:
        raise SystemExit(f"the row written with ('2024-02-01', '%Y-%m-%d') reads back as {feb}")

    client.soft_delete_table(table_name, 300)
    if table_name in client.list_tables() or table_name not in client.list_soft_deleted_tables():
        raise SystemExit("the soft-deleted table is still listed, or not listed as soft-deleted")
    print("soft-deleted:", client.list_soft_deleted_tables())
    client.recall_table(table.id)
    recalled = client.table(table_name)
    count = len(recalled.scanner().open().read_all_tuples())
    print("recalled:", table_name, "rows:", count)
    if count != 41:
        raise SystemExit(f"the recalled table has {count} rows, not 41")
    client.delete_table(table_name)
    client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", default="127.0.0.1:7051", help="master address(es), host:port[,host:port...]")
    ap.add_argument("--table", default="kudu_python_demo", help="table to create (and delete at the end)")
    args = ap.parse_args()
    run(args.master, args.table)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

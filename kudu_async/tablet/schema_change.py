"""Schema changes of a tablet: AlterSchema checked against Kudu's rules and applied in log order.

Columns are matched by id: files keep the column ids they were written with and are read through the
current schema by id (see :mod:`kudu_async.tablet.diskrowset`), so an alter rewrites no data. Writes
prepared for the old schema are refused when applied (see :mod:`kudu_async.tablet.write_path`).
"""

from __future__ import annotations

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.schema import Schema
from kudu_async.tablet.components import TabletComponents
from kudu_async.tablet.diskrowset import DiskRowSet
from kudu_async.tablet.rowset_maintenance import RowSetMaintenance
from kudu_async.tablet.schema_info import SchemaInfo, column_ids, tablet_schema_info


def alter_schema(
    c: TabletComponents, maintenance: RowSetMaintenance, new_schema: Schema, version: int, log_index: int
) -> bool:
    """Apply an AlterSchema replicated at ``log_index``; False if ``version`` is not newer (replay).

    Columns are matched by id: renamed ones keep their data, added ones read as their default (or
    NULL) in older rows, dropped ones disappear. Everything in memory is flushed first and the new
    schema is committed with a replay start at ``log_index``, so bootstrap never replays a write
    built for the old schema against the new one (and replays the alter itself if it crashed before).
    Writes prepared for the old schema are refused when applied (:meth:`.WritePath.apply`).
    """
    with c.maint_lock:
        if version <= c.schema_version:
            return False
        schema = _check_alter(c.info, new_schema)
        ids = set(column_ids(schema))
        cur_ids = set(c.info.ids)
        # The default an added column has now is what older rows read from then on (Kudu's read
        # default), whatever later alters make of its write default.
        added = [d for d in c.added_columns if d.get("id") in ids]
        added += [col.to_dict() for col in schema.columns if col.id not in cur_ids]
        new_info = tablet_schema_info(schema, added)
        while True:
            maintenance.flush_all()
            with c.lock:
                old_drs = list(c.drs)
            # Files are re-read outside the component lock: only this thread (holding the
            # maintenance lock) changes the rowset list or their files.
            new_drs = [DiskRowSet(new_info, d.meta, c.bm, deltas=d.built_delta_index()) for d in old_drs]
            with c.lock:
                if c.drs != old_drs or _dirty_locked(c):
                    continue  # a write for the old schema was applied meanwhile: flush it too
                saved = (c.info, c.schema_version, c.added_columns, c.last_applied_index)
                c.info, c.schema_version, c.added_columns = new_info, version, added
                c.last_applied_index = max(c.last_applied_index, log_index)
                try:
                    maintenance.write_metadata_locked(new_drs)
                except BaseException:
                    c.info, c.schema_version, c.added_columns, c.last_applied_index = saved
                    raise
                c.drs = new_drs
                for d in old_drs:
                    d.retired = True  # scans already open keep reading them with the old schema
                c.mrs = c.new_mrs()
                return True


def _dirty_locked(c: TabletComponents) -> bool:
    """Anything in memory that is not in a file yet (MemRowSets, DeltaMemStores)?"""
    return bool(len(c.mrs) or c.flushing_mrs or any(len(d.dms) or d.flushing_dms for d in c.drs))


def _check_alter(info: SchemaInfo, new_schema: Schema) -> Schema:
    """The new schema with ids for added columns, after Kudu's alter rules (matched by id)."""
    cur = info.schema
    cur_by_id = dict(zip(info.ids, cur.columns, strict=True))
    next_id = max(info.ids, default=-1) + 1
    schema = new_schema.with_column_ids(next_id)
    new_ids = column_ids(schema)
    new_key = [(c.id, c.name) for c in schema.key_columns]
    cur_key = [(c.id, c.name) for c in cur.key_columns]
    if [i for i, _ in new_key] != [i for i, _ in cur_key]:
        # Name the first key position that differs (the current column there, else the new one).
        pos = next(
            p
            for p in range(max(len(new_key), len(cur_key)))
            if p >= len(new_key) or p >= len(cur_key) or new_key[p][0] != cur_key[p][0]
        )
        name = cur_key[pos][1] if pos < len(cur_key) else new_key[pos][1]
        raise KuduInvalidArgument(
            f"AlterSchema cannot change the primary key columns (key column '{name}')", {"column": name}
        )
    for cid, c in zip(new_ids, schema.columns, strict=True):
        old = cur_by_id.get(cid)
        if old is None:
            if cid < next_id:
                raise KuduInvalidArgument(f"column '{c.name}' reuses the id {cid} of a dropped column")
            if not c.nullable and c.default is None:
                raise KuduInvalidArgument(
                    f"added column '{c.name}' must be nullable or have a default", {"column": c.name}
                )
            continue
        for attr in ("type", "nullable", "precision", "scale", "length"):
            if getattr(c, attr) != getattr(old, attr):
                raise KuduInvalidArgument(f"column '{old.name}': cannot change its {attr}", {"column": old.name})
    dropped = [c.name for c in cur.columns if c.id not in new_ids]
    key_dropped = [n for n in dropped if cur.is_key_column(n)]
    if key_dropped:
        raise KuduInvalidArgument(f"cannot drop key column '{key_dropped[0]}'", {"column": key_dropped[0]})
    return schema

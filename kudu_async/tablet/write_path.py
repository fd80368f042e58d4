"""The write path of a tablet: validate, lock and decide a batch of row operations, then apply it.

Contract (the Raft layer sits between the two halves, as in Kudu):

1. :meth:`WritePath.prepare` validates the rows, takes the row locks of every key in the batch
   (blocking up to ``lock_timeout_s``; pass 0 from an event loop and retry on KuduTimedOut), decides per
   row what will happen (insert / update / delete / error / ignored) and registers the timestamp with
   MVCC as in flight. Nothing is visible yet. Timestamps must increase in log-index order (the leader's
   hybrid clock guarantees it).
2. The caller replicates the op (the WAL entry is a :class:`~kudu_async.tablet.ops.LoggedWrite`), then
   calls :meth:`WritePath.apply`: the mutations go into the MemRowSet/delta stores, MVCC commits the
   timestamp (scans see it from now on), locks are released and the :class:`WriteResult` returned.
   :meth:`WritePath.abort` instead drops the locks and the MVCC registration.

Because the locks are held from prepare to apply, the per-row outcome decided in prepare stays valid.
A write is prepared against one schema version; apply refuses it (KuduIllegalState) if an alter landed
in between.

Storage invariant: a key lives in exactly one rowset (the MemRowSet or one DiskRowSet); re-inserting a
deleted key adds a re-insert mutation to the rowset that holds it. Hence every op's effect on a key is
in one store.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument
from kudu_async.common.row_conversion import VALID_OP_TYPES, op_mask
from kudu_async.common.schema import AUTO_INC_SET_ON_INSERT
from kudu_async.tablet.components import TabletComponents
from kudu_async.tablet.delta_store import delta_chunk
from kudu_async.tablet.diskrowset import DiskRowSet
from kudu_async.tablet.key_arrays import KeyBatch
from kudu_async.tablet.memrowset import MemRowSet
from kudu_async.tablet.ops import OpType, RowError, WouldBlock, WriteOp, WriteResult
from kudu_async.tablet.schema_info import SchemaInfo

# What a row of a batch does (WritePlan.kind); 0: nothing.
INSERT, UPDATE, DELETE = 1, 2, 3
_INSERTISH = (OpType.INSERT, OpType.INSERT_IGNORE, OpType.UPSERT, OpType.UPSERT_IGNORE)
_INSERT_OPS = (OpType.INSERT, OpType.INSERT_IGNORE)
_UPSERT_OPS = (OpType.UPSERT, OpType.UPSERT_IGNORE)
_UPDATE_OPS = (OpType.UPDATE, OpType.UPDATE_IGNORE)
_IGNORE_OPS = (OpType.INSERT_IGNORE, OpType.UPSERT_IGNORE, OpType.UPDATE_IGNORE, OpType.DELETE_IGNORE)


@dataclass
class WritePlan:
    """What :meth:`Tablet.prepare_write` decided for every row of a batch, column-wise.

    ``kind[i]`` is ``INSERT``/``UPDATE``/``DELETE``, or 0 for a row with no effect (an error, an
    ignored op, a replayed row already durable). ``store[i]`` indexes ``stores``, the rowset that held
    the row's key when decided (-1: none; ``pos[i]`` is the position in a DiskRowSet's base data).
    ``chained[i]`` (None when no key repeats in the batch) marks a row whose key an earlier row of the
    same batch already acts on: its target is wherever that earlier action left the key.
    """

    kind: np.ndarray
    store: np.ndarray
    pos: np.ndarray
    stores: list[MemRowSet | DiskRowSet]
    chained: np.ndarray | None = None


@dataclass
class PreparedWrite:
    """The outcome of :meth:`Tablet.prepare_write`; pass it to apply_write or abort_write."""

    op: WriteOp
    timestamp: int
    owner: int
    key_batch: KeyBatch  # the rows' encoded keys, in the forms the index probes use (made once, at prepare)
    plan: WritePlan
    errors: list[RowError]
    ignored: int
    state: str = "prepared"
    schema_version: int = 0

    def outcome(self) -> WriteResult:
        """What applying it will answer (without the log index): row errors and ignored rows are decided
        here and the plan fixes the counts; the row locks keep that true until it is applied."""
        kind = self.plan.kind
        return WriteResult(
            self.timestamp,
            0,
            list(self.errors),
            int(np.count_nonzero(kind == INSERT)),
            int(np.count_nonzero(kind == UPDATE)),
            int(np.count_nonzero(kind == DELETE)),
            self.ignored,
        )


def _same_data(a: pa.RecordBatch, b: pa.RecordBatch) -> bool:
    """Whether two batches hold the same values in the same memory (validation and casts passed a
    batch through unchanged), with the same column names and types."""
    if a is b:
        return True
    if a.num_rows != b.num_rows or not a.schema.equals(b.schema):
        return False
    for x, y in zip(a.columns, b.columns, strict=True):
        if x.offset != y.offset:
            return False
        for bx, by in zip(x.buffers(), y.buffers(), strict=True):
            if (bx is None) != (by is None) or (
                bx is not None and by is not None and (bx.address != by.address or bx.size != by.size)
            ):
                return False
    return True


@dataclass(frozen=True)
class _UpsertImmutable:
    """UPSERT rows of a batch that set an immutable column: each fails if its key is present."""

    rows: np.ndarray
    info: SchemaInfo
    set_columns: np.ndarray | None

    def error(self, row: int) -> RowError:
        return _immutable_error(self.info, row, self.set_columns)


class WritePath:
    """Prepares, applies and aborts writes on a tablet's components."""

    def __init__(self, components: TabletComponents) -> None:
        self._c = components
        self._owner = itertools.count(1)  # row-lock owner ids, one per prepared write
        # The largest auto-incrementing id this tablet holds or has handed out (0: none); the tablet seeds
        # it from its stored rows on open, replayed and replicated writes raise it to the ids they carry.
        self.auto_increment = 0
        self._auto_increment_lock = threading.Lock()

    def _lock_components(self, wait: bool) -> None:
        """Take the component lock; without ``wait`` (on an event loop), refuse to wait for it."""
        if not self._c.lock.acquire(blocking=wait):
            raise WouldBlock(f"tablet {self._c.tablet_id}: the component lock is held by background work")

    def prepare(
        self,
        op: WriteOp,
        timestamp: int,
        *,
        replay: bool = False,
        lock_timeout_s: float | None = None,
        wait: bool = True,
    ) -> PreparedWrite:
        """Validate, lock and decide every row; register ``timestamp`` with MVCC (see module doc).

        The write is validated against the schema current when it starts and records that version:
        if an AlterSchema lands before it is applied, :meth:`apply_write` refuses it. Without ``wait``
        (a small write on the event loop) it raises :class:`WouldBlock`, holding nothing, where it would
        wait for the component lock or probe DiskRowSets; pass ``lock_timeout_s=0`` too.
        """
        self._lock_components(wait)  # one consistent (schema, version) pair: an alter swaps both under it
        try:
            info, version = self._c.info, self._c.schema_version
        finally:
            self._c.lock.release()
        rows = op.rows
        if rows.schema.names != info.names:
            raise KuduInvalidArgument(f"write columns {rows.schema.names} do not match the schema columns {info.names}")
        if not rows.schema.equals(info.arrow, check_metadata=False):
            rows = pa.RecordBatch.from_arrays(
                [c.cast(f.type) for c, f in zip(rows.columns, info.arrow, strict=True)],
                schema=info.arrow,
            )
        n = rows.num_rows
        op_types = np.asarray(
            op.op_types.to_numpy(zero_copy_only=False) if isinstance(op.op_types, pa.Array) else op.op_types
        )
        if op_types.dtype != np.int8:
            op_types = op_types.astype(np.int64)
        if len(op_types) != n:
            raise KuduInvalidArgument(f"{len(op_types)} op types for {n} rows")
        if not op_mask(op_types, VALID_OP_TYPES).all():
            bad = set(op_types.tolist()) - {int(t) for t in OpType}
            raise KuduInvalidArgument(f"unknown row operation types {sorted(bad)}")
        op_types = op_types.astype(np.int8, copy=False)  # every valid type fits; op_mask's fastest form
        errors: dict[int, RowError] = {}
        if info.schema.auto_incrementing_index is not None:
            rows = self._assign_auto_increment(info, rows, op_types, replay, errors)
        rows = self._validate_rows(info, rows, op_types, errors)
        kb = self._encode_keys_checked(info, rows, errors)
        self._check_nulls(info, rows, op_types, op.set_columns, errors)
        touches = self._immutable_touches(info, op_types, op.set_columns, errors)
        upsert_imm = (
            None if touches is None else _UpsertImmutable(touches & (op_types == OpType.UPSERT), info, op.set_columns)
        )
        owner = next(self._owner)
        key_set = kb.key_set()
        self._c.locks.acquire(
            key_set, owner, self._c.options.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
        )
        try:
            self._lock_components(wait)
            try:
                if self._c.schema_version != version:
                    raise KuduIllegalState(
                        f"tablet {self._c.tablet_id}: schema changed to version {self._c.schema_version} while "
                        f"preparing a write for version {version}"
                    )
                drs = self._candidate_drs(kb)
                if drs and not wait:
                    raise WouldBlock(f"tablet {self._c.tablet_id}: deciding the write probes DiskRowSets")
                plan, ignored = self._decide(
                    op_types, kb, errors, timestamp, replay, drs, distinct=key_set.n == n, upsert_imm=upsert_imm
                )
            finally:
                self._c.lock.release()
            self._c.mvcc.start_op(timestamp)
        except BaseException:
            self._c.locks.release_all(owner)
            raise
        set_columns = op.set_columns
        if touches is not None:
            set_columns, skipped = self._skip_immutable_cells(info, op_types, set_columns, plan.kind, touches)
            ignored += skipped
        return PreparedWrite(
            op=WriteOp(
                op_types,
                rows,
                set_columns,
                op.rows_ipc if op.rows_ipc is not None and _same_data(rows, op.rows) else None,
            ),
            timestamp=timestamp,
            owner=owner,
            key_batch=kb,
            plan=plan,
            errors=sorted(errors.values(), key=lambda e: e.row_index),
            ignored=ignored,
            schema_version=version,
        )

    def _assign_auto_increment(
        self, info: SchemaInfo, rows: pa.RecordBatch, op_types: np.ndarray, replay: bool, errors: dict[int, RowError]
    ) -> pa.RecordBatch:
        """Give every INSERT row of a table with a non-unique primary key the next ids of this tablet's
        counter (vectorised). The leader decides them here; the log entry carries the rows with their ids,
        so a follower or a replay stores the same ids (and only raises its counter to them). A client's
        INSERT that sets the column itself is refused, as Kudu does."""
        ai = info.schema.auto_incrementing_index
        assert ai is not None
        col = rows.column(ai)
        inserts = op_mask(op_types, _INSERT_OPS)
        given = (
            np.ones(len(col), dtype=bool) if col.null_count == 0 else pc.is_valid(col).to_numpy(zero_copy_only=False)
        )
        if not replay:
            for i in np.flatnonzero(inserts & given).tolist():
                errors[i] = RowError(i, "INVALID_ARGUMENT", AUTO_INC_SET_ON_INSERT)
        need = inserts & ~given
        k = int(np.count_nonzero(need))
        carried = op_mask(op_types, _INSERTISH) & given  # ids the rows bring: the counter goes past them
        if not replay:
            carried &= ~inserts  # refused above
        highest = 0
        if carried.any():
            highest = max(0, int(pc.max(col.filter(pa.array(carried))).as_py()))
        with self._auto_increment_lock:
            base = self.auto_increment
            if base + k > np.iinfo(np.int64).max:
                raise KuduIllegalState(f"tablet {self._c.tablet_id}: max auto-incrementing column value reached")
            self.auto_increment = max(base + k, highest)
        if not k:
            return rows
        values = np.array(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), dtype=np.int64, copy=True)
        values[need] = np.arange(base + 1, base + k + 1, dtype=np.int64)
        filled = pa.array(values, pa.int64(), mask=~(given | need))
        return rows.set_column(ai, info.arrow.field(ai), filled)

    def _validate_rows(
        self, info: SchemaInfo, rows: pa.RecordBatch, op_types: np.ndarray, errors: dict[int, RowError]
    ) -> pa.RecordBatch:
        """Per-row INVALID_ARGUMENT via common's ``Schema.validate_batch_rows`` (vectorised).

        Insert-like rows are checked as inserts (every value), UPDATE/DELETE rows as deletes (key
        columns; NOT NULL for set columns of updates is checked by :meth:`_check_nulls`). A batch of
        only insert-like rows also takes the normalised values (e.g. VARCHAR truncation).
        """
        validate = info.schema.validate_batch_rows
        if rows.num_rows == 0:
            return rows
        insertish = op_mask(op_types, _INSERTISH)
        # Insert-like rows carry every column; with an auto-incrementing column, INSERT rows have their ids
        # by now, so they are checked as UPSERTs are (the id present, not negative).
        as_insert = "insert" if info.schema.auto_incrementing_index is None else "upsert"
        if insertish.all():
            out, errs = validate(rows, for_op=as_insert)
            for i, msg in errs.items():
                errors[int(i)] = RowError(int(i), "INVALID_ARGUMENT", msg)
            return out if out.schema.equals(info.arrow, check_metadata=False) else rows
        for mask, for_op in ((insertish, as_insert), (~insertish, "delete")):
            idx = np.flatnonzero(mask)
            if len(idx):
                _, errs = validate(rows.take(pa.array(idx)), for_op=for_op)
                for j, msg in errs.items():
                    i = int(idx[int(j)])
                    errors[i] = RowError(i, "INVALID_ARGUMENT", msg)
        return rows

    def _encode_keys_checked(self, info: SchemaInfo, rows: pa.RecordBatch, errors: dict[int, RowError]) -> KeyBatch:
        """Every row's encoded key (none for an invalid row)."""
        null_mask = None
        for name in info.key_names:
            m = pc.is_null(rows.column(name))
            null_mask = m if null_mask is None else pc.or_(null_mask, m)
        has_nulls = null_mask is not None and pc.any(null_mask).as_py()
        if not has_nulls and not errors:
            return KeyBatch(arr=info.encode_keys_array(rows))
        bad = (
            null_mask.to_numpy(zero_copy_only=False).copy()
            if has_nulls and null_mask is not None
            else np.zeros(rows.num_rows, dtype=bool)
        )
        for i in np.flatnonzero(bad):
            errors.setdefault(int(i), RowError(int(i), "INVALID_ARGUMENT", "primary key column is NULL"))
        bad[list(errors)] = True  # rows already invalid (e.g. an oversize key) are not encoded
        good = np.flatnonzero(~bad)
        enc = info.encode_keys(rows.take(pa.array(good))) if len(good) else []
        out: list[bytes | None] = [None] * rows.num_rows
        for gi, k in zip(good.tolist(), enc, strict=True):
            out[gi] = k
        return KeyBatch(out)

    def _check_nulls(
        self,
        info: SchemaInfo,
        rows: pa.RecordBatch,
        op_types: np.ndarray,
        set_columns: np.ndarray | None,
        errors: dict[int, RowError],
    ) -> None:
        full_row = op_mask(op_types, _INSERTISH)
        mutating = op_mask(op_types, _UPDATE_OPS)
        for ci, f in enumerate(info.arrow):
            if f.nullable or ci < info.num_key_columns or rows.column(ci).null_count == 0:
                continue
            isnull = pc.is_null(rows.column(ci)).to_numpy(zero_copy_only=False)
            check = full_row | mutating if set_columns is None else full_row | (mutating & set_columns[:, ci])
            for i in np.flatnonzero(isnull & check):
                errors.setdefault(
                    int(i),
                    RowError(int(i), "INVALID_ARGUMENT", f"column '{f.name}' is NOT NULL but got NULL"),
                )

    @staticmethod
    def _immutable_touches(
        info: SchemaInfo, op_types: np.ndarray, set_columns: np.ndarray | None, errors: dict[int, RowError]
    ) -> np.ndarray | None:
        """Which update-like rows set a cell of an immutable column (None: no row does). An UPDATE that
        does fails here (Kudu's decoder refuses it before looking the key up); whether an UPSERT does
        depends on the key being present, so :meth:`_decide` settles those."""
        imm = info.immutable_indices
        if not imm:
            return None
        mutating = op_mask(op_types, _UPSERT_OPS + _UPDATE_OPS)
        touches = mutating if set_columns is None else mutating & set_columns[:, imm].any(axis=1)
        if not touches.any():
            return None
        for i in np.flatnonzero(touches & (op_types == OpType.UPDATE)).tolist():
            errors.setdefault(i, _immutable_error(info, i, set_columns))
        return touches

    @staticmethod
    def _skip_immutable_cells(
        info: SchemaInfo, op_types: np.ndarray, set_columns: np.ndarray | None, kind: np.ndarray, touches: np.ndarray
    ) -> tuple[np.ndarray | None, int]:
        """UPDATE_IGNORE and UPSERT_IGNORE rows that update a present row leave its immutable cells
        alone and apply the rest; a row left with nothing to set becomes an ignored row. Returns the
        set-column matrix to apply and the number of rows so ignored (``kind`` is changed in place)."""
        rows = touches & (kind == UPDATE) & op_mask(op_types, (OpType.UPDATE_IGNORE, OpType.UPSERT_IGNORE))
        if not rows.any():
            return set_columns, 0
        out = np.ones((len(kind), len(info.names)), dtype=bool) if set_columns is None else set_columns.copy()
        out[np.ix_(np.flatnonzero(rows), np.asarray(info.immutable_indices, dtype=np.int64))] = False
        empty = rows & ~out[:, info.value_indices].any(axis=1)
        kind[empty] = 0
        return out, int(np.count_nonzero(empty))

    def _candidate_drs(self, kb: KeyBatch) -> list[DiskRowSet]:
        """The DiskRowSets whose key range meets the batch's."""
        bounds = kb.bounds() if self._c.drs else None
        if bounds is None:
            return []
        lo, hi = bounds
        return [d for d in self._c.drs if d.min_key <= hi and d.max_key >= lo]

    def locate_batch(
        self, kb: KeyBatch, want: np.ndarray, drs: list[DiskRowSet] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[MemRowSet | DiskRowSet]]:
        """:meth:`_locate` plus the key's last change for every row in ``want``, vectorised.

        Returns (store index into the returned rowset list or -1, DiskRowSet position or -1,
        last-change timestamp or -1, live). MemRowSets are probed through their key indexes; each
        DiskRowSet whose key range meets the batch takes the rows in its range (bisect on the sorted
        batch keys), drops most absent ones with a batch bloom probe and places the rest with one
        ``searchsorted``. A key lives in one rowset only, so a row found once is not probed again.
        ``drs``: the DiskRowSets whose range meets the batch's, when the caller has them.
        """
        n = kb.n
        store = np.full(n, -1, dtype=np.int32)
        pos = np.full(n, -1, dtype=np.int64)
        latest = np.full(n, -1, dtype=np.int64)
        live = np.zeros(n, dtype=bool)
        stores: list[MemRowSet | DiskRowSet] = []
        todo = want.copy()
        for m in self._c.memrowsets():
            if not len(m):
                continue
            cand = np.flatnonzero(todo)
            found = m.rownums_of(kb, cand)
            hit = found >= 0
            if not hit.any():
                continue
            idx = cand[hit]
            store[idx] = len(stores)
            stores.append(m)
            rownums = found[hit]
            latest[idx], live[idx] = m.latest_of(rownums)
            todo[idx] = False
        if not todo.any():
            drs = []
        elif drs is None:
            drs = self._candidate_drs(kb)
        if drs:
            for d in drs:
                cand = kb.rows_in_range(d.min_key, d.max_key)
                cand = cand[todo[cand]]
                if not len(cand):
                    continue
                p = d.find_rows(kb, cand)
                hit = p >= 0
                if not hit.any():
                    continue
                idx, pp = cand[hit], p[hit]
                store[idx] = len(stores)
                stores.append(d)
                pos[idx] = pp
                latest[idx], live[idx] = d.rows_latest(pp)
                todo[idx] = False
        return store, pos, latest, live, stores

    def _decide(
        self,
        op_types: np.ndarray,
        kb: KeyBatch,
        errors: dict[int, RowError],
        ts: int,
        replay: bool,
        drs: list[DiskRowSet],
        distinct: bool = False,
        upsert_imm: _UpsertImmutable | None = None,
    ) -> tuple[WritePlan, int]:
        """Every row's outcome, vectorised: locate all keys at once, then decide by op type and the
        key's liveness. Rows whose key repeats in the batch are decided in order (each sees the effect
        of the earlier ones); with ``replay``, keys changed at or after ``ts`` are skipped (their
        effect is already in durable files). ``distinct``: the caller knows every row has a key and
        no key repeats. ``upsert_imm``: UPSERT rows that set an immutable column (an error when the key
        is present). ``drs``: the DiskRowSets whose key range meets the batch's (``_candidate_drs``)."""
        n = kb.n
        if not errors and not drs and self._all_fresh_inserts(op_types, kb, distinct):
            # Nothing holds any key: no errors, and nothing replay could skip.
            return WritePlan(
                np.full(n, INSERT, dtype=np.int8),
                np.full(n, -1, dtype=np.int32),
                np.full(n, -1, dtype=np.int64),
                [],
            ), 0
        valid = np.ones(n, dtype=bool)
        if errors:
            valid[np.fromiter(errors, dtype=np.int64, count=len(errors))] = False
        store, pos, latest, live, stores = self.locate_batch(kb, valid, drs)
        keys = kb.keys
        act = valid
        if replay:
            act = act & ~((store >= 0) & (latest >= ts))
        vkeys = keys if valid.all() else list(itertools.compress(keys, valid))
        dup: np.ndarray | None = None
        if not distinct and len(set(vkeys)) != len(vkeys):
            counts = Counter(vkeys)
            dup = np.zeros(n, dtype=bool)
            many = np.fromiter(map(counts.__getitem__, vkeys), dtype=np.int64, count=len(vkeys)) > 1
            dup[np.flatnonzero(valid)[many]] = True
        single = act if dup is None else act & ~dup
        t = op_types
        ins, ups, upd = op_mask(t, _INSERT_OPS), op_mask(t, _UPSERT_OPS), op_mask(t, _UPDATE_OPS)
        dele = ~(ins | ups | upd)
        kind = np.zeros(n, dtype=np.int8)
        kind[single & ((ins | ups) & ~live)] = INSERT
        kind[single & ((ups | upd) & live)] = UPDATE
        kind[single & dele & live] = DELETE
        if upsert_imm is not None:
            refused = single & live & upsert_imm.rows
            kind[refused] = 0
            for i in np.flatnonzero(refused).tolist():
                errors[i] = upsert_imm.error(i)
        for i in np.flatnonzero(single & (t == OpType.INSERT) & live).tolist():
            errors[i] = RowError(i, "ALREADY_PRESENT", "key already present")
        for i in np.flatnonzero(single & ((t == OpType.UPDATE) | (t == OpType.DELETE)) & ~live).tolist():
            errors[i] = RowError(i, "NOT_FOUND", "key not found")
        ignored = int(
            np.count_nonzero(
                single
                & (
                    ((t == OpType.INSERT_IGNORE) & live)
                    | (((t == OpType.UPDATE_IGNORE) | (t == OpType.DELETE_IGNORE)) & ~live)
                )
            )
        )
        chained: np.ndarray | None = None
        if dup is not None:
            chained = np.zeros(n, dtype=bool)
            ignored += self._decide_in_order(
                np.flatnonzero(act & dup), t, keys, live, kind, chained, errors, upsert_imm
            )
        return WritePlan(kind, store, pos, stores, chained), ignored

    @staticmethod
    def _decide_in_order(
        rows: np.ndarray,
        op_types: np.ndarray,
        keys: list[bytes | None],
        live: np.ndarray,
        kind: np.ndarray,
        chained: np.ndarray,
        errors: dict[int, RowError],
        upsert_imm: _UpsertImmutable | None = None,
    ) -> int:
        """Rows whose key repeats in the batch, one by one in row order (only these loop in Python)."""
        overlay: dict[bytes | None, bool] = {}
        touched: set[bytes | None] = set()
        ignored = 0
        for i in rows.tolist():
            key, t = keys[i], int(op_types[i])
            cur = overlay.get(key)
            if cur is None:
                cur = bool(live[i])
            if t in _UPSERT_OPS:
                if cur and upsert_imm is not None and upsert_imm.rows[i]:
                    errors[i] = upsert_imm.error(i)
                    continue
                k = UPDATE if cur else INSERT
            else:
                wants_live = t not in _INSERT_OPS  # an update or delete needs the key, an insert its absence
                if cur != wants_live:
                    if t in _IGNORE_OPS:
                        ignored += 1
                    elif wants_live:
                        errors[i] = RowError(i, "NOT_FOUND", "key not found")
                    else:
                        errors[i] = RowError(i, "ALREADY_PRESENT", "key already present")
                    continue
                k = INSERT if not wants_live else UPDATE if t in _UPDATE_OPS else DELETE
            overlay[key] = k != DELETE
            kind[i] = k
            if key in touched:
                chained[i] = True
            else:
                touched.add(key)
        return ignored

    def _all_fresh_inserts(self, op_types: np.ndarray, kb: KeyBatch, distinct: bool = False) -> bool:
        """Fast path: only insert-like rows, distinct keys, none in a MemRowSet (the caller has checked
        that no DiskRowSet's key range meets the batch's)."""
        if not op_mask(op_types, _INSERTISH).all():
            return False
        if not distinct and len(set(kb.keys)) != kb.n:
            return False
        return not any((m.rownums_of(kb) >= 0).any() for m in self._c.memrowsets() if len(m))

    def apply(self, prepared: PreparedWrite, log_index: int, *, wait: bool = True) -> WriteResult:
        """Apply a prepared op at its timestamp, commit it in MVCC and release its locks. Without ``wait``
        it raises :class:`WouldBlock`, with the write still prepared, where it would wait for the
        component lock or look for rows a flush moved to disk since prepare."""
        if prepared.state != "prepared":
            raise KuduIllegalState(f"write is {prepared.state}, cannot apply")
        ts = prepared.timestamp
        res = WriteResult(ts, log_index, list(prepared.errors), ignored=prepared.ignored)
        current = prepared.schema_version
        self._lock_components(wait)  # the schema is checked under the lock AlterSchema swaps it under
        try:
            current = self._c.schema_version
            if current == prepared.schema_version:
                if not wait and any(st.retired for st in prepared.plan.stores):
                    current = -1  # not applied: the write stays prepared
                    raise WouldBlock(f"tablet {self._c.tablet_id}: rows of the write were flushed since prepare")
                self._apply_locked(prepared, log_index, res)
                self._c.last_applied_index = max(self._c.last_applied_index, log_index)
                self._c.mvcc.commit_op(ts)
        finally:
            self._c.lock.release()
            if current == prepared.schema_version:
                prepared.state = "applied"
                self._c.locks.release_all(prepared.owner)
        if current != prepared.schema_version:
            self.abort(prepared)
            raise KuduIllegalState(
                f"write prepared for schema version {prepared.schema_version}, the tablet is at {current}"
            )
        return res

    def _apply_locked(self, prepared: PreparedWrite, log_index: int, res: WriteResult) -> None:
        """Apply the plan: new keys go to the MemRowSet in one bulk insert, mutations of keys held by
        a MemRowSet join their rows' chains, and those of DiskRowSet rows go to each rowset's
        DeltaMemStore. Mutations take sequence numbers in row order, so repeated keys apply in order.
        """
        ts = prepared.timestamp
        rows = prepared.op.rows
        plan = prepared.plan
        karr = prepared.key_batch.arr
        act = np.flatnonzero(plan.kind)
        if not len(act):
            return
        kind = plan.kind[act]
        store = plan.store[act]
        chained = np.zeros(len(act), dtype=bool) if plan.chained is None else plan.chained[act]
        if len(act) == rows.num_rows and not (store >= 0).any() and not chained.any() and not self._c.mrs.retired:
            base = self._add_to_mrs(rows)
            self._c.mrs.insert_many(karr, range(base, base + len(act)), ts, log_index, prepared.key_batch.order())
            res.inserted += len(act)
            return
        pos = plan.pos[act]
        stores = list(plan.stores)
        gone = [sid for sid, st in enumerate(stores) if st.retired]
        if gone:
            # Flushed or compacted since prepare (the row locks kept the keys' content): find them again.
            moved = np.flatnonzero(np.isin(store, gone))
            mkb = KeyBatch(arr=karr.take(pa.array(act[moved])))
            st2, pos2, _, _, stores2 = self.locate_batch(mkb, np.ones(mkb.n, dtype=bool))
            store = store.copy()
            pos = pos.copy()
            store[moved] = np.where(st2 >= 0, st2 + len(stores), -1)
            pos[moved] = pos2
            stores.extend(stores2)
        seqs = self._c.take_seqs(len(act)) + np.arange(len(act), dtype=np.int64)
        # New keys: no rowset holds them and no earlier row of this batch acted on them.
        fresh = np.flatnonzero((store < 0) & ~chained)
        if len(fresh):
            base = self._add_to_mrs(rows)
            fr = act[fresh]
            self._c.mrs.insert_many(karr.take(pa.array(fr)), base + fr, ts, log_index)
        # Everything else mutates an existing row (keys created by this batch live in self._c.mrs): one
        # delta chunk per rowset.
        targets = [self._c.mrs, *stores]
        rest = np.flatnonzero((store >= 0) | chained)
        tids = store[rest] + 1
        for tid in np.unique(tids).tolist():
            sel = rest[tids == tid]
            target = targets[tid]
            at = pos[sel] if isinstance(target, DiskRowSet) else None
            self._mutate(target, prepared, log_index, act[sel], kind[sel], at, seqs[sel])
        res.inserted += int(np.count_nonzero(kind == INSERT))
        res.updated += int(np.count_nonzero(kind == UPDATE))
        res.deleted += int(np.count_nonzero(kind == DELETE))

    def _add_to_mrs(self, rows: pa.RecordBatch) -> int:
        """Store a batch's rows in the MemRowSet (their keys are indexed by the caller); its first row number."""
        mrs = self._c.mrs
        base = mrs.add_batch(rows)
        if mrs.created_at is None:
            mrs.created_at = time.monotonic()
        return base

    def _mutate(
        self,
        store: MemRowSet | DiskRowSet,
        prepared: PreparedWrite,
        log_index: int,
        rows_idx: np.ndarray,
        kinds: np.ndarray,
        positions: np.ndarray | None,
        seqs: np.ndarray,
    ) -> None:
        """Re-inserts, updates and deletes of one rowset's rows as one delta chunk; ``positions``: the rows'
        places in a DiskRowSet's base data (a MemRowSet finds its rows by key)."""
        if positions is None:
            assert isinstance(store, MemRowSet)
            positions = store.rownums_of(prepared.key_batch, rows_idx)
            if (positions < 0).any():
                raise AssertionError("a MemRowSet mutation of a key the MemRowSet does not hold")
        reinsert = kinds == INSERT
        table, nbytes = delta_chunk(
            self._c.info, prepared.op, rows_idx, positions, kinds != DELETE, reinsert, prepared.timestamp, seqs
        )
        store.mutate_batch(positions, table, reinsert, log_index, prepared.timestamp, nbytes)

    def abort(self, prepared: PreparedWrite) -> None:
        """Give up a prepared op (not replicated): release its locks, forget its timestamp."""
        if prepared.state != "prepared":
            return
        prepared.state = "aborted"
        self._c.mvcc.abort_op(prepared.timestamp)
        self._c.locks.release_all(prepared.owner)


def _immutable_error(info: SchemaInfo, row: int, set_columns: np.ndarray | None) -> RowError:
    """Kudu's per-row error for a write that would change an immutable column, naming the first such
    column the row sets (``set_columns`` None: every column is set)."""
    col = next(info.schema.columns[ci] for ci in info.immutable_indices if set_columns is None or set_columns[row, ci])
    return RowError(row, "IMMUTABLE", f"UPDATE not allowed for immutable column: {col.name} {col.type_to_string()}")

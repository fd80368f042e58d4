"""The ``kudu`` PySpark data source: batch reads (one Spark partition per scan token, Arrow batches,
filters pushed to the tablets), batch writes through ``Session.apply_arrow`` and a streaming upsert sink.

Everything a Spark task needs travels inside the pickled reader/writer as plain options and predicate
maps; each Python worker keeps one client per cluster (as kudu-spark keeps one per JVM).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import logging
import sys
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from kudu_async.common.errors import KuduAlreadyPresent, KuduBadStatus, KuduInvalidArgument, KuduNotAuthorized

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from kudu_async.client.sync import Client
    from kudu_async.client.table import Table
    from kudu_async.common.predicate import ColumnPredicate
    from kudu_async.common.schema import Schema

# The client, pyarrow and the type mapping are imported where they are used: PySpark unpickles this
# module's classes in a new Python process for each planning and commit step, and a commit needs none
# of them (they cost ~0.4 s of imports per process).

log = logging.getLogger(__name__)

NAME = "kudu"
WRITE_OPERATIONS = (
    "insert",
    "insert_ignore",
    "upsert",
    "upsert_ignore",
    "update",
    "update_ignore",
    "delete",
    "delete_ignore",
)
WRITE_FLUSH_ROWS = 100_000  # rows gathered from Spark's 10k-row batches before one apply_arrow
_FILTER_OPS: dict[type, str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}

# --- options and the per-worker client -------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One ``kudu.*`` option: its value kind, its default and what it does (shown in errors and the README)."""

    kind: str  # "str", "int", "bool"
    default: Any
    meaning: str


# kudu-spark's options (DefaultSource, KuduReadOptions, KuduWriteOptions) by their Kudu names, then this
# source's own. Matched without regard to case: PySpark hands a data source its options with lower-cased keys.
KUDU_SPARK_OPTIONS: dict[str, Option] = {
    "kudu.master": Option("str", "127.0.0.1:7051", "comma-separated master addresses"),
    "kudu.table": Option("str", None, "table name (required)"),
    "kudu.operation": Option("str", "upsert", "write operation: " + ", ".join(WRITE_OPERATIONS)),
    "kudu.faultTolerantScan": Option("bool", False, "fault-tolerant scans: ordered by key, resumed on a replica"),
    "kudu.scanLocality": Option("str", "closest_replica", "closest_replica or leader_only"),
    "kudu.batchSize": Option("int", 8 * 1024 * 1024, "bytes per scan batch (at most 16 MiB)"),
    "kudu.keepAlivePeriodMs": Option("int", 15_000, "keep-alive period of a scanner waiting on Spark"),
    "kudu.scanRequestTimeoutMs": Option("int", None, "timeout of each scan request"),
    "kudu.socketReadTimeoutMs": Option("int", None, "deprecated in kudu-spark and without effect there too"),
    "kudu.splitSizeBytes": Option(
        "int", None, "target bytes per Spark partition: a tablet holding more is read as several (SplitKeyRange)"
    ),
    "kudu.useDriverMetadata": Option("bool", True, "tasks use the table metadata in the scan token"),
    "kudu.snapshotTimestampMs": Option("int", None, "READ_AT_SNAPSHOT at this time (ms since the epoch)"),
    "kudu.ignoreNull": Option("bool", False, "null cells leave the stored value unchanged"),
    "kudu.ignoreDuplicateRowErrors": Option("bool", False, "insert skips rows whose key exists (insert_ignore)"),
    "kudu.repartition": Option("bool", False, "repartition rows by Kudu partition before writing (KuduContext)"),
    "kudu.repartition.sort": Option("bool", True, "also sort by primary key when repartitioning"),
    "kudu.handleSchemaDrift": Option("bool", False, "add DataFrame columns missing from the table (nullable)"),
    "kudu.saslProtocolName": Option("str", "kudu", "SASL protocol name (authentication is not available)"),
    "kudu.requireAuthentication": Option(
        "bool", False, "refuse to go on without authenticated credentials (kudu.jwt): the connect fails instead"
    ),
    "kudu.encryptionPolicy": Option("str", "optional", "optional, required_remote or required (only optional)"),
    "kudu.jwt": Option(
        "str", None, "a JSON Web Token to authenticate with: the masters check it and issue an authn token"
    ),
}
OWN_OPTIONS: dict[str, Option] = {
    "kudu.operationTimeoutMs": Option("int", 30_000, "timeout of admin and write operations"),
    "kudu.columns": Option("str", None, "comma-separated columns to read (the read schema)"),
    "kudu.filterPushdown": Option("bool", None, "push filters to the tablets (default: on with register())"),
    "kudu.readMode": Option("str", "READ_AT_SNAPSHOT", "READ_LATEST or READ_AT_SNAPSHOT"),
    "kudu.snapshotTimestampMicros": Option("int", None, "READ_AT_SNAPSHOT at this time (us since the epoch)"),
    "kudu.createTable": Option("bool", False, "create the table from the DataFrame schema if missing"),
    "kudu.primaryKey": Option("str", None, "comma-separated key columns for kudu.createTable"),
    "kudu.hashBuckets": Option("int", 3, "hash buckets for kudu.createTable (below 2: one tablet)"),
    "kudu.hashColumns": Option("str", None, "hash columns for kudu.createTable (default: the key)"),
    "kudu.replicas": Option("int", 3, "replication factor for kudu.createTable"),
}
OPTIONS: dict[str, Option] = {**KUDU_SPARK_OPTIONS, **OWN_OPTIONS}
_BY_LOWER = {k.lower(): k for k in OPTIONS}


def check_options(options: Any) -> None:
    """Refuse an unknown ``kudu.*`` option (a misspelt one would otherwise do nothing), a value of the wrong
    kind, and any security option asking for what the cluster cannot give."""
    for key in list(options.keys()):
        k = str(key)
        if not k.lower().startswith("kudu."):
            continue
        name = _BY_LOWER.get(k.lower())
        if name is None:
            raise KuduInvalidArgument(f"unknown option {k}; the kudu source knows {', '.join(sorted(OPTIONS))}")
        kind = OPTIONS[name].kind
        if kind == "int":
            _int_opt(options, name)
        elif kind == "bool":
            _bool_opt(options, name)
    from kudu_async.client.options import check_security

    policy = (_opt(options, "kudu.encryptionPolicy", "optional") or "optional").lower()
    sasl = _opt(options, "kudu.saslProtocolName", "kudu")
    try:
        check_security(
            policy,
            _bool_opt(options, "kudu.requireAuthentication"),
            None if sasl == "kudu" else sasl,
            _opt(options, "kudu.jwt"),
        )
    except KuduBadStatus as e:
        raise type(e)(f"kudu source security options: {e.message}") from None
    if _bool_opt(options, "kudu.requireAuthentication") and _opt(options, "kudu.jwt") is None:
        raise KuduNotAuthorized(
            "kudu source security options: kudu.requireAuthentication needs credentials to authenticate with "
            "(give kudu.jwt)"
        )


def _opt(options: Any, key: str, default: str | None = None) -> str | None:
    v = options.get(key)
    if v is None:
        v = options.get(key.lower())
    return default if v is None or v == "" else str(v)


def _int_opt(options: Any, key: str, default: int | None = None) -> int | None:
    v = _opt(options, key)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise KuduInvalidArgument(f"option {key} must be an integer, got {v!r}") from None
    if n < 0:
        raise KuduInvalidArgument(f"option {key} must not be negative, got {n}")
    return n


def _bool_opt(options: Any, key: str, default: bool = False) -> bool:
    v = _opt(options, key)
    if v is None:
        return default
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no"):
        return False
    raise KuduInvalidArgument(f"option {key} must be true or false, got {v!r}")


def _masters(options: Any) -> list[str]:
    m = _opt(options, "kudu.master", "127.0.0.1:7051")
    assert m is not None
    return [a.strip() for a in m.split(",") if a.strip()]


def _table_name(options: Any) -> str:
    name = _opt(options, "kudu.table")
    if name is None:
        raise KuduInvalidArgument("option kudu.table is required")
    return name


_clients: dict[tuple[Any, ...], Client] = {}
_clients_lock = threading.Lock()


def client_for(options: Any) -> Client:
    """This process's client for the cluster named by the options (created once; closed at exit, as every
    sync client left open is)."""
    timeout = _int_opt(options, "kudu.operationTimeoutMs", 30_000)
    policy = (_opt(options, "kudu.encryptionPolicy", "optional") or "optional").lower()
    jwt = _opt(options, "kudu.jwt")
    require_authn = bool(_bool_opt(options, "kudu.requireAuthentication"))
    # Credentials are part of the key: two users of one cluster in one process each get their own client.
    key = (tuple(_masters(options)), timeout, policy, jwt, require_authn)
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            from kudu_async.client.sync import connect

            c = connect(
                list(key[0]),
                admin_timeout_ms=timeout,
                rpc_timeout_ms=min(timeout or 10_000, 10_000),
                encryption_policy=policy,
                require_authentication=require_authn,
                jwt=jwt,
            )
            _clients[key] = c
        return c


_heap_settled = False


def _settle_worker_heap() -> None:
    """Once per PySpark daemon worker, after its first kudu task or planning: one full collection, then
    ``gc.freeze()``.

    PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task (and after every
    planning call of a planner worker), and the worker takes no new work until it is done. With PySpark,
    pyarrow and a connected client loaded that collection walks ~85,000 long-lived objects (modules,
    classes, the client): 24-34 ms of CPU per read task measured in the bench, more than the tablet scan
    the task ran, and 11-14 ms per planning. Frozen objects are left out of every later collection (and
    are still freed by reference counting); objects later tasks create are collected as usual. Only in
    a process forked by ``pyspark.daemon``: a process that calls the source directly keeps its collector.
    """
    global _heap_settled
    if _heap_settled or "pyspark.daemon" not in getattr(sys, "orig_argv", ()):
        return
    _heap_settled = True
    gc.collect()
    gc.freeze()


def _close_clients() -> None:
    """Close and forget this process's cached clients (tests do, between clusters; at exit the sync
    client's own hook closes whatever is still open)."""
    with _clients_lock:
        for c in _clients.values():
            try:
                c.close()
            except KuduBadStatus as e:
                log.debug("closing a cached kudu client failed: %s", e)
        _clients.clear()


# --- the data source --------------------------------------------------------------------------------


class KuduDataSource(DataSource):
    """``format("kudu")``; ``register(spark)`` registers this class and turns on Python filter pushdown."""

    pushdown_default = True

    @classmethod
    def name(cls) -> str:
        return NAME

    def _table(self) -> Table:
        check_options(self.options)
        return client_for(self.options).table(_table_name(self.options))

    def schema(self) -> StructType:
        from kudu_async.spark.types import spark_schema

        table = self._table()
        cols = _opt(self.options, "kudu.columns")
        names = [c.strip() for c in cols.split(",")] if cols else None
        for n in names or []:
            if n not in table.schema:
                raise KuduInvalidArgument(f"kudu.columns names '{n}', which is not a column of table {table.name}")
        return spark_schema(table.schema, names)

    def reader(self, schema: StructType) -> DataSourceReader:
        table = self._table()
        for f in schema.fields:
            if f.name not in table.schema:
                raise KuduInvalidArgument(f"column '{f.name}' of the read schema is not in table {table.name}")
        if _bool_opt(self.options, "kudu.filterPushdown", self.pushdown_default):
            return KuduPushdownReader(dict(self.options), schema, table.schema)
        return KuduReader(dict(self.options), schema, table.schema)

    def writer(self, schema: StructType, overwrite: bool) -> KuduWriter:
        _check_overwrite(overwrite)
        check_options(self.options)
        _check_repartition(self.options)
        op = _operation(self.options, "upsert")
        table = _create_or_open(self.options, schema)
        table = _handle_schema_drift(self.options, table, schema)
        _check_write_columns(table, schema)
        return KuduWriter(dict(self.options), op)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KuduStreamWriter:
        _check_overwrite(overwrite)
        check_options(self.options)
        _check_repartition(self.options)
        op = _operation(self.options, "upsert")
        if op not in ("upsert", "upsert_ignore", "delete_ignore", "update_ignore", "insert_ignore"):
            raise KuduInvalidArgument(
                f"a streaming sink must be replayable: kudu.operation {op} would fail or "
                "duplicate on a replayed micro-batch; use upsert"
            )
        table = _create_or_open(self.options, schema)
        table = _handle_schema_drift(self.options, table, schema)
        _check_write_columns(table, schema)
        return KuduStreamWriter(dict(self.options), op)


class DefaultSource(KuduDataSource):
    """What Spark registers by itself (module ``pyspark_kudu_async``): pushdown only when asked with
    option kudu.filterPushdown=true, since Spark refuses pushdown unless its session conf enables it."""

    pushdown_default = False


def register(spark: SparkSession) -> None:
    """Register ``format("kudu")`` on a SparkSession and enable Python data source filter pushdown."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KuduDataSource)


# By default the JVM talks to its Python workers over loopback TCP, where the input a task sends after its
# command arrived ~40 ms late, every task (the constant delay of a delayed ACK): an empty Python source's
# task took 57 ms, 21 ms over Unix domain sockets (SPARK-51688, Spark 4.1+), which have no such stall.
UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"


def local_session(app_name: str = "kudu_async", partitions: int = 4) -> SparkSession:
    """A local SparkSession for tests, scripts and demos: local[2], UI and progress bars off, bound to
    127.0.0.1, UTC, workers on this interpreter (PYSPARK_PYTHON) reached over Unix sockets
    (:data:`UNIX_SOCKETS`), with the kudu source registered."""
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config(UNIX_SOCKETS, "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _check_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise KuduInvalidArgument(
            "the kudu data source only appends (mode 'append'); Kudu tables are updated by "
            "key - use kudu.operation upsert/delete instead of overwrite"
        )


def _operation(options: Any, default: str) -> str:
    """The write operation; kudu-spark's hyphenated spellings (``insert-ignore``) are accepted, and
    kudu.ignoreDuplicateRowErrors turns insert into insert_ignore as kudu-spark's session does."""
    op = (_opt(options, "kudu.operation", default) or default).lower().replace("-", "_")
    if op not in WRITE_OPERATIONS:
        raise KuduInvalidArgument(f"kudu.operation must be one of {', '.join(WRITE_OPERATIONS)}, not {op!r}")
    if op == "insert" and _bool_opt(options, "kudu.ignoreDuplicateRowErrors"):
        log.warning("kudu.ignoreDuplicateRowErrors is deprecated: use kudu.operation insert_ignore")
        return "insert_ignore"
    return op


def _check_repartition(options: Any) -> None:
    if _bool_opt(options, "kudu.repartition"):
        raise KuduInvalidArgument(
            "kudu.repartition needs the whole DataFrame, which a data source writer never sees: write with "
            "kudu_async.spark.KuduContext (e.g. upsertRows(df, table, KuduWriteOptions(repartition=True)))"
        )


def _handle_schema_drift(options: Any, table: Table, schema: StructType) -> Table:
    """kudu.handleSchemaDrift: add the DataFrame's columns the table lacks, as nullable columns."""
    if not _bool_opt(options, "kudu.handleSchemaDrift"):
        return table
    from kudu_async.spark.types import kudu_column

    new = [f for f in schema.fields if _match_column(table, f.name) is None]
    if not new:
        return table
    client = client_for(options)
    alterer = client.new_table_alterer(table)
    for f in new:
        c = kudu_column(f, key=False)
        spec = alterer.add_column(f.name, c.type, nullable=True, precision=c.precision, scale=c.scale)
        if c.nested_type is not None:
            spec.nested_type(c.nested_type)  # an ArrayType field: kudu-spark adds a nullable array column
    log.info("kudu.handleSchemaDrift: adding columns", extra={"table": table.name, "columns": [f.name for f in new]})
    try:
        alterer.alter()
    except KuduBadStatus as e:
        if not isinstance(e, KuduAlreadyPresent):  # else another writer added them first
            raise
    return client.table(table.name)


def _create_or_open(options: Any, schema: StructType) -> Table:
    client = client_for(options)
    name = _table_name(options)
    if not _bool_opt(options, "kudu.createTable") or client.table_exists(name):
        return client.table(name)
    keys_opt = _opt(options, "kudu.primaryKey")
    if not keys_opt:
        raise KuduInvalidArgument("kudu.createTable needs kudu.primaryKey (comma-separated key columns)")
    keys = [k.strip() for k in keys_opt.split(",")]
    from kudu_async.client.schema_builder import Partitioning
    from kudu_async.spark.types import kudu_schema

    kudu_table_schema = kudu_schema(schema, keys, "kudu.primaryKey")
    part = Partitioning()
    buckets = _int_opt(options, "kudu.hashBuckets", 3) or 0
    hash_cols = [c.strip() for c in (_opt(options, "kudu.hashColumns") or keys_opt).split(",")]
    if buckets >= 2:
        part.add_hash_partitions(hash_cols, buckets)
    part.set_range_partition_columns([])
    replicas = _int_opt(options, "kudu.replicas", 3)
    try:
        return client.create_table(name, kudu_table_schema, part, n_replicas=replicas)
    except KuduBadStatus as e:
        if client.table_exists(name):  # another writer created it first
            return client.table(name)
        raise KuduInvalidArgument(f"creating table {name} from the DataFrame schema failed: {e}") from e


def _check_write_columns(table: Table, schema: StructType) -> None:
    for f in schema.fields:
        if _match_column(table, f.name) is None:
            raise KuduInvalidArgument(
                f"DataFrame column '{f.name}' is not a column of table {table.name} "
                f"(its columns: {', '.join(table.schema.names)})"
            )


def _match_column(table: Table, name: str) -> str | None:
    if name in table.schema:
        return name
    lower = {n.lower(): n for n in table.schema.names}
    return lower.get(name.lower())


# --- reading ----------------------------------------------------------------------------------------


def _configure_scan(b: Any, options: Any) -> None:
    """Apply the read options to a scan token builder, as kudu-spark's KuduRDD does to its own."""
    mode = (_opt(options, "kudu.readMode", "READ_AT_SNAPSHOT") or "").upper()
    if mode not in ("READ_LATEST", "READ_AT_SNAPSHOT"):
        raise KuduInvalidArgument(f"kudu.readMode must be READ_LATEST or READ_AT_SNAPSHOT, not {mode!r}")
    locality = (_opt(options, "kudu.scanLocality", "closest_replica") or "").lower()
    if locality not in ("closest_replica", "leader_only"):
        raise KuduInvalidArgument(f"kudu.scanLocality must be closest_replica or leader_only, not {locality!r}")
    b.set_selection(locality)
    # READ_AT_SNAPSHOT by default, as kudu-spark reads (any replica can serve it); a READ_LATEST scan that
    # reaches a follower is sent on to the leader by the tablet server's refusal.
    b.set_read_mode("latest" if mode == "READ_LATEST" else "snapshot")
    snap_us = _int_opt(options, "kudu.snapshotTimestampMicros")
    snap_ms = _int_opt(options, "kudu.snapshotTimestampMs")
    if snap_us is not None and snap_ms is not None:
        raise KuduInvalidArgument("give kudu.snapshotTimestampMs or kudu.snapshotTimestampMicros, not both")
    snap = snap_us if snap_ms is None else snap_ms * 1000
    if snap is not None:
        b.set_snapshot(snap)
    if _bool_opt(options, "kudu.faultTolerantScan"):
        b.set_fault_tolerant()
    b.set_batch_size_bytes(_int_opt(options, "kudu.batchSize", 8 * 1024 * 1024) or 8 * 1024 * 1024)
    timeout = _int_opt(options, "kudu.scanRequestTimeoutMs")
    if timeout is not None:
        b.set_timeout_millis(timeout)
    if _opt(options, "kudu.socketReadTimeoutMs") is not None:
        log.warning("kudu.socketReadTimeoutMs is deprecated and has no effect (as in kudu-spark)")
    split = _int_opt(options, "kudu.splitSizeBytes")
    if split:
        b.set_split_size_bytes(split)


class KuduInputPartition(InputPartition):
    """One scan token (one tablet) and its replicas' hosts."""

    def __init__(self, token: bytes, tablet_id: str, hosts: list[str]) -> None:
        super().__init__(tablet_id)
        self.token = token
        self.tablet_id = tablet_id
        self.hosts = hosts


class KuduReader(DataSourceReader):
    def __init__(self, options: dict[str, Any], schema: StructType, table_schema: Schema) -> None:
        from kudu_async.spark.types import expected_arrow_schema

        self.options = options
        self.columns = [f.name for f in schema.fields]
        self.arrow_schema = expected_arrow_schema(schema)
        self.table_schema_dict = table_schema.to_dict()
        self.predicates: list[dict[str, Any]] = []

    def partitions(self) -> list[InputPartition]:
        from kudu_async.common.predicate import ColumnPredicate

        table = client_for(self.options).table(_table_name(self.options))
        b = table.scan_token_builder().set_projected_column_names(self.columns)
        for p in self.predicates:
            b.add_predicate(ColumnPredicate.from_dict(p))
        _configure_scan(b, self.options)
        parts: list[InputPartition] = [KuduInputPartition(t.serialize(), t.tablet().id(), t.hosts()) for t in b.build()]
        _settle_worker_heap()  # the planner worker: planning runs again for every query
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KuduInputPartition):
            return  # Spark's placeholder partition when there are no tablets to scan
        client = client_for(self.options)
        token = partition.token
        if not _bool_opt(self.options, "kudu.useDriverMetadata", True):
            token = _with_current_metadata(client, token)
        scanner = client.deserialize_token_into_scanner(token)
        period_ms = _int_opt(self.options, "kudu.keepAlivePeriodMs", 15_000) or 15_000
        with _KeepAlive(scanner, period_ms / 1000.0) as keep_alive:
            for table in scanner.xbatches_arrow():  # opens with the first fetch, reads one batch ahead
                for batch in table.to_batches():
                    with keep_alive.waiting():  # while Spark consumes the batch
                        yield _conform(batch, self.arrow_schema)
        _settle_worker_heap()


def _with_current_metadata(client: Client, token: bytes) -> bytes:
    """kudu.useDriverMetadata=false: the token with its table's metadata looked up again from the master."""
    import msgpack

    from kudu_async.client.scanner import ScanToken

    d = ScanToken.parse(token)
    d["table"] = client.table(d["table"]["name"]).info
    return bytes(msgpack.packb(d))


class _KeepAlive:
    """A thread that sends ScannerKeepAlive every period while the reader waits on Spark (kudu-spark's
    keepAlivePeriodMs): a scanner left idle past the tablet server's scanner_ttl_ms would expire."""

    def __init__(self, scanner: Any, period_s: float) -> None:
        self.scanner = scanner
        self.period_s = period_s
        self.sent = 0
        self._waiting = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kudu-keepalive", daemon=True)

    def __enter__(self) -> _KeepAlive:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if not self._waiting:
                continue
            try:
                self.scanner.keep_alive()
                self.sent += 1
            except KuduBadStatus as e:
                log.warning("kudu scanner keep-alive failed: %s", e)


class KuduPushdownReader(KuduReader):
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Accept comparisons, IN, IS [NOT] NULL on plain columns (ANDed by Spark); keep the rest for Spark.
        A LIKE 'abc%' is pushed as ``>= 'abc'`` and also left to Spark (the prefix check stays exact)."""
        from kudu_async.common.schema import Schema

        schema = Schema.from_dict(self.table_schema_dict)
        for f in filters:
            pred, exact = _translate(f, schema)
            if pred is not None:
                self.predicates.append(pred.to_dict())
            if not exact:
                yield f


def _translate(f: Filter, schema: Schema) -> tuple[ColumnPredicate | None, bool]:
    """(predicate to push or None, whether the predicate alone is exactly ``f``)."""
    from kudu_async.common.predicate import ColumnPredicate

    attr: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if len(attr) != 1 or attr[0] not in schema:
        return None, False
    col = attr[0]
    value: Any = getattr(f, "value", None)
    try:
        if isinstance(f, IsNull):
            return ColumnPredicate(col, "IS NULL"), True
        if isinstance(f, IsNotNull):
            return ColumnPredicate(col, "IS NOT NULL"), True
        if isinstance(f, In):
            vals = [_spark_value(v) for v in value]
            return ColumnPredicate(col, "IN", vals).bind(schema), True
        if isinstance(f, StringStartsWith) and schema.column(col).type.name in ("string", "varchar"):
            return ColumnPredicate(col, ">=", value).bind(schema), False
        op = _FILTER_OPS.get(type(f))
        if op is None or value is None:
            return None, False
        return ColumnPredicate(col, op, _spark_value(value)).bind(schema), True
    except KuduBadStatus:
        return None, False  # a value the column cannot hold: Spark evaluates it


def _spark_value(v: Any) -> Any:
    """Spark hands timestamps as naive local datetimes: make them aware so they mean the same instant."""
    if isinstance(v, _dt.datetime) and v.tzinfo is None:
        return v.astimezone(_dt.UTC)
    return v


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    if batch.schema.equals(schema):
        return batch
    arrays = [batch.column(f.name).cast(f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --- writing ----------------------------------------------------------------------------------------


@dataclass
class KuduCommitMessage(WriterCommitMessage):
    rows: int = 0
    metrics: dict[str, int] = field(default_factory=dict)


class KuduWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, Any], operation: str) -> None:
        self.options = options
        self.operation = operation

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KuduCommitMessage:
        return _write_batches(self.options, self.operation, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, KuduCommitMessage))
        log.info("kudu write committed", extra={"rows": rows, "table": _table_name(self.options)})

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Kudu writes are not transactional: rows written by tasks that succeeded stay.
        log.warning("kudu write aborted; rows already written stay", extra={"table": _table_name(self.options)})


class KuduStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch is upserted: replaying a batch after a failure leaves the same rows, no duplicates."""

    def __init__(self, options: dict[str, Any], operation: str) -> None:
        self.options = options
        self.operation = operation

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KuduCommitMessage:
        return _write_batches(self.options, self.operation, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, KuduCommitMessage))
        log.info("kudu stream batch committed", extra={"rows": rows, "batch": batchId})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("kudu stream batch aborted (it will be replayed)", extra={"batch": batchId})


def _write_batches(options: dict[str, Any], operation: str, iterator: Iterator[pa.RecordBatch]) -> KuduCommitMessage:
    """Write a task's batches, sending one gathered chunk while the next is read from Spark.

    ``apply_arrow`` waits for replication; one call in flight on a helper thread lets the task keep
    pulling Arrow batches from the JVM meanwhile (the two stages overlap instead of taking turns).
    """
    import pyarrow as pa

    client = client_for(options)
    table = client.table(_table_name(options))
    timeout = _int_opt(options, "kudu.operationTimeoutMs", 30_000) or 30_000
    session = client.new_session(timeout_ms=timeout)
    ignore_null = _bool_opt(options, "kudu.ignoreNull")
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    total = 0

    def send(batches: list[pa.RecordBatch]) -> int:
        data = pa.Table.from_batches(batches).combine_chunks()
        data = data.rename_columns([_match_column(table, n) or n for n in data.schema.names])
        try:
            return session.apply_arrow(table, data, operation, ignore_null)
        except KuduBadStatus as e:
            errors, overflowed = session.get_pending_errors()
            if not errors:  # the call itself failed (no row was refused): say why, here, not only in a cause
                raise type(e)(f"kudu.operation {operation} into {table.name} failed: {e.message}", e.details) from e
            first = "; ".join(f"{err.status} in row {err.failed_op()}" for err in errors[:5])
            more = f" (and {len(errors) - 5}{'+' if overflowed else ''} more)" if len(errors) > 5 else ""
            raise KuduBadStatus(
                f"kudu.operation {operation} into {table.name} failed for {len(errors)} row(s): {first}{more}"
            ) from e

    with ThreadPoolExecutor(1, thread_name_prefix="kudu-write") as sender:
        inflight: Future[int] | None = None

        def hand_over() -> None:
            nonlocal pending, pending_rows, inflight, total
            if inflight is not None:
                total += inflight.result()  # at most one chunk in flight; its error fails the task here
            inflight = sender.submit(send, pending) if pending else None
            pending, pending_rows = [], 0

        try:
            for batch in iterator:
                pending.append(batch)
                pending_rows += batch.num_rows
                if pending_rows >= WRITE_FLUSH_ROWS:
                    hand_over()
            hand_over()
            hand_over()
        finally:
            if inflight is not None and not inflight.done():
                inflight.cancel()
                wait([inflight])
    _settle_worker_heap()
    return KuduCommitMessage(total, session.get_write_op_metrics())


__all__ = ["NAME", "DefaultSource", "KuduDataSource", "local_session", "register"]

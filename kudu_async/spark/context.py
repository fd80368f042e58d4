"""kudu-spark's ``KuduContext`` for PySpark: table administration and DataFrame writes by operation, with
kudu-spark's ``KuduWriteOptions``/``KuduReadOptions`` and camelCase method names, so Scala code ports line
for line. Writes go through the ``kudu`` data source (Arrow batches per task, one client per worker)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.spark.source import NAME, _match_column, check_options, client_for, register

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from kudu_async.client.schema_builder import Partitioning
    from kudu_async.client.sync import Client
    from kudu_async.client.table import Table
    from kudu_async.common.schema import Schema

log = logging.getLogger(__name__)

PARTITION_COLUMN = "__kudu_partition_index"


def _bool(v: bool) -> str:
    return "true" if v else "false"


@dataclass(frozen=True)
class KuduWriteOptions:
    """kudu-spark's write options (field names as in Scala's case class)."""

    ignoreDuplicateRowErrors: bool = False
    ignoreNull: bool = False
    repartition: bool = False
    repartitionSort: bool = True
    handleSchemaDrift: bool = False

    def to_options(self) -> dict[str, str]:
        """The data source options these fields stand for (without the repartition, done on the DataFrame)."""
        return {
            "kudu.ignoreDuplicateRowErrors": _bool(self.ignoreDuplicateRowErrors),
            "kudu.ignoreNull": _bool(self.ignoreNull),
            "kudu.handleSchemaDrift": _bool(self.handleSchemaDrift),
        }


@dataclass(frozen=True)
class KuduReadOptions:
    """kudu-spark's read options (field names as in Scala's case class)."""

    batchSize: int = 8 * 1024 * 1024
    scanLocality: str = "closest_replica"
    faultTolerantScanner: bool = False
    keepAlivePeriodMs: int = 15_000
    scanRequestTimeoutMs: int | None = None
    socketReadTimeoutMs: int | None = None
    splitSizeBytes: int | None = None
    useDriverMetadata: bool = True
    snapshotTimestampMs: int | None = None

    def to_options(self) -> dict[str, str]:
        opts = {
            "kudu.batchSize": str(self.batchSize),
            "kudu.scanLocality": self.scanLocality,
            "kudu.faultTolerantScan": _bool(self.faultTolerantScanner),
            "kudu.keepAlivePeriodMs": str(self.keepAlivePeriodMs),
            "kudu.useDriverMetadata": _bool(self.useDriverMetadata),
        }
        for key, v in (
            ("kudu.scanRequestTimeoutMs", self.scanRequestTimeoutMs),
            ("kudu.socketReadTimeoutMs", self.socketReadTimeoutMs),
            ("kudu.splitSizeBytes", self.splitSizeBytes),
            ("kudu.snapshotTimestampMs", self.snapshotTimestampMs),
        ):
            if v is not None:
                opts[key] = str(v)
        return opts


class CreateTableOptions:
    """The Java client's ``CreateTableOptions`` builder as kudu-spark code uses it (each returns self)."""

    def __init__(self) -> None:
        from kudu_async.client.schema_builder import Partitioning

        self.partitioning: Partitioning = Partitioning()
        self.num_replicas: int | None = None
        self._range_columns: list[str] = []

    def setNumReplicas(self, n: int) -> CreateTableOptions:
        self.num_replicas = n
        return self

    def addHashPartitions(self, columns: Sequence[str], buckets: int, seed: int | None = None) -> CreateTableOptions:
        self.partitioning.add_hash_partitions(list(columns), buckets, seed)
        return self

    def setRangePartitionColumns(self, columns: Sequence[str]) -> CreateTableOptions:
        self._range_columns = list(columns)
        self.partitioning.set_range_partition_columns(self._range_columns)
        return self

    def addRangePartition(self, lower: Any, upper: Any) -> CreateTableOptions:
        """A range [lower, upper) of the range columns (dicts, tuples or PartialRows)."""
        self.partitioning.add_range_partition(lower, upper)
        return self

    def addSplitRow(self, row: Any) -> CreateTableOptions:
        self.partitioning.add_range_partition_split(row)
        return self


class KuduContext:
    """``KuduContext(kudu_master, spark_session)``: one client per process for the cluster (the data
    source's), the ``kudu`` format registered on the session (with Python filter pushdown on)."""

    def __init__(
        self,
        kuduMaster: str,
        sparkSession: SparkSession,
        socketReadTimeoutMs: int | None = None,
        saslProtocolName: str | None = None,
        requireAuthentication: bool = False,
        encryptionPolicy: str = "optional",
    ) -> None:
        if not isinstance(kuduMaster, str) or not kuduMaster.strip():
            raise KuduInvalidArgument(f"kuduMaster is comma-separated master addresses, not {kuduMaster!r}")
        self.kuduMaster = kuduMaster
        self.spark = sparkSession
        self.socketReadTimeoutMs = socketReadTimeoutMs
        self._options: dict[str, str] = {"kudu.master": kuduMaster, "kudu.encryptionPolicy": encryptionPolicy}
        if saslProtocolName is not None:
            self._options["kudu.saslProtocolName"] = saslProtocolName
        if requireAuthentication:
            self._options["kudu.requireAuthentication"] = "true"
        check_options(self._options)  # a security option the cluster cannot honour fails here, not later
        register(sparkSession)

    # --- the client and tables ---------------------------------------------------------------------

    @property
    def syncClient(self) -> Client:
        """This process's blocking ``kudu_async`` client for the cluster."""
        return client_for(self._options)

    def tableExists(self, tableName: str) -> bool:
        return self.syncClient.table_exists(tableName)

    def deleteTable(self, tableName: str) -> None:
        self.syncClient.delete_table(tableName)

    def createSchema(self, schema: StructType, keys: Sequence[str]) -> Schema:
        """A Kudu schema from a Spark one: ``keys`` first, in that order, not null; the rest nullable as in
        the Spark schema."""
        from kudu_async.spark.types import kudu_schema

        keys = list(keys)
        if not keys:
            raise KuduInvalidArgument("a Kudu table needs at least one key column")
        return kudu_schema(schema, keys, "the key column list")

    def createTable(
        self,
        tableName: str,
        schema: StructType | Schema,
        keys: Sequence[str] | CreateTableOptions | None = None,
        options: CreateTableOptions | Partitioning | None = None,
    ) -> Table:
        """``createTable(name, sparkSchema, keys, options)`` or ``createTable(name, kuduSchema, options)``."""
        from kudu_async.client.schema_builder import Partitioning
        from kudu_async.common.schema import Schema

        if isinstance(keys, CreateTableOptions):
            keys, options = None, keys
        if isinstance(schema, Schema):
            kschema = schema
        else:
            if keys is None:
                raise KuduInvalidArgument("createTable from a Spark schema needs the key columns")
            kschema = self.createSchema(schema, keys)
        if options is None:
            raise KuduInvalidArgument("createTable needs CreateTableOptions (at least its partitioning)")
        part = options if isinstance(options, Partitioning) else options.partitioning
        replicas = None if isinstance(options, Partitioning) else options.num_replicas
        if replicas is None:
            return self.syncClient.create_table(tableName, kschema, part)
        return self.syncClient.create_table(tableName, kschema, part, n_replicas=replicas)

    def kuduRDD(
        self,
        sc: Any,
        tableName: str,
        columnProjection: Sequence[str] = (),
        options: KuduReadOptions | None = None,
    ) -> DataFrame:
        """kudu-spark's ``kuduRDD(sc, table, columns, readOptions)`` as a DataFrame of those columns (all
        when none are named); ``sc`` is accepted for the same call shape and not needed."""
        r = self.spark.read.format(NAME).options(**self._options).option("kudu.table", tableName)
        r = r.options(**(options or KuduReadOptions()).to_options())
        if columnProjection:
            r = r.option("kudu.columns", ",".join(columnProjection))
        return r.load()

    # --- writes --------------------------------------------------------------------------------------

    def insertRows(self, data: DataFrame, tableName: str, writeOptions: KuduWriteOptions | None = None) -> None:
        self._write(data, tableName, "insert", writeOptions)

    def insertIgnoreRows(self, data: DataFrame, tableName: str, writeOptions: KuduWriteOptions | None = None) -> None:
        self._write(data, tableName, "insert_ignore", writeOptions)

    def upsertRows(self, data: DataFrame, tableName: str, writeOptions: KuduWriteOptions | None = None) -> None:
        self._write(data, tableName, "upsert", writeOptions)

    def updateRows(self, data: DataFrame, tableName: str, writeOptions: KuduWriteOptions | None = None) -> None:
        self._write(data, tableName, "update", writeOptions)

    def deleteRows(self, data: DataFrame, tableName: str, writeOptions: KuduWriteOptions | None = None) -> None:
        self._write(data, tableName, "delete", writeOptions)

    def deleteIgnoreRows(self, data: DataFrame, tableName: str, writeOptions: KuduWriteOptions | None = None) -> None:
        self._write(data, tableName, "delete_ignore", writeOptions)

    def _write(self, data: DataFrame, table_name: str, op: str, write_options: KuduWriteOptions | None) -> None:
        wo = write_options or KuduWriteOptions()
        if wo.repartition:
            data = self._repartition(data, table_name, wo.repartitionSort)
        w = data.write.format(NAME).options(**self._options).options(**wo.to_options())
        w.option("kudu.table", table_name).option("kudu.operation", op).mode("append").save()

    def _hash_targets(self, n: int) -> list[int]:
        """For each partition index i < n, a number that ``repartition(n, col)`` sends to partition i.

        A PySpark DataFrame takes no custom partitioner (kudu-spark's partitions by tablet index); its hash
        partitioning is ``pmod(hash(col), n)``, so one small query finds a value landing on each index."""
        rows = (
            self.spark.range(0, 64 * n).selectExpr("id", f"pmod(hash(id), {n}) AS p").groupBy("p").min("id").collect()
        )
        found = {int(r[0]): int(r[1]) for r in rows}
        if len(found) < n:
            raise KuduInvalidArgument(f"repartition: no value hashes to each of {n} Spark partitions")
        return [found[i] for i in range(n)]

    def _repartition(self, data: DataFrame, table_name: str, sort: bool) -> DataFrame:
        """One Spark partition per Kudu tablet (rows keyed by their tablet's index, as kudu-spark's
        repartitionRows), optionally sorted by primary key within each."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StructField, StructType

        client = self.syncClient
        table = client.table(table_name)
        tablets = [t.location.to_wire() for t in client.new_scan_token_builder(table).build()]
        keys = []
        for c in table.schema.names[: table.schema.num_key_columns]:
            name = next((f.name for f in data.schema.fields if _match_column(table, f.name) == c), None)
            if name is None:
                raise KuduInvalidArgument(
                    f"repartition: key column '{c}' of table {table_name} is not in the DataFrame"
                )
            keys.append(name)
        n = max(len(tablets), 1)
        out = StructType([*data.schema.fields, StructField(PARTITION_COLUMN, LongType(), False)])
        options = dict(self._options)
        targets = self._hash_targets(n)

        def index(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            yield from _tablet_index(options, table_name, tablets, targets, batches)

        keyed = data.mapInArrow(index, out).repartition(n, F.col(PARTITION_COLUMN))
        if sort:
            keyed = keyed.sortWithinPartitions(PARTITION_COLUMN, *keys)
        return keyed.drop(PARTITION_COLUMN)


def _tablet_index(
    options: dict[str, str],
    table_name: str,
    tablets: list[dict[str, Any]],
    targets: list[int],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Each batch with, per row, the value that Spark's hash partitioning sends to its tablet's partition
    (vectorised partition keys, then a lookup in ``targets``)."""
    import numpy as np
    import pyarrow as pa

    from kudu_async.client.meta_cache import TableLocations, TabletLocation

    table = client_for(options).table(table_name)
    locs = TableLocations(table.id, [TabletLocation.from_wire(t) for t in tablets])
    schema = table.schema
    for batch in batches:
        cols = {}
        for f in batch.schema:
            c = _match_column(table, f.name)
            if c is not None:
                cols[c] = batch.column(f.name).cast(schema.column(c).arrow_type)
        keyed = pa.RecordBatch.from_pydict(cols)
        where = locs.assign(table.partition_schema.partition_keys(keyed))
        values = np.asarray(targets, dtype=np.int64)[where.clip(0, None)]
        yield batch.append_column(PARTITION_COLUMN, pa.array(values, pa.int64()))


__all__ = ["CreateTableOptions", "KuduContext", "KuduReadOptions", "KuduWriteOptions"]

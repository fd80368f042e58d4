"""The client (kudu-python's ``kudu.client``; async classes in ``kudu_async.aio``); imports only common and rpc."""

from kudu_async.client.batcher import KuduError
from kudu_async.client.meta_cache import TabletLocation as Tablet
from kudu_async.client.scanner import (
    CLOSEST_REPLICA,
    FIRST_REPLICA,
    LEADER_ONLY,
    READ_AT_SNAPSHOT,
    READ_LATEST,
    READ_YOUR_WRITES,
    ScanToken,
)
from kudu_async.client.schema_builder import Partitioning, RangePartition
from kudu_async.client.session import FLUSH_AUTO_BACKGROUND, FLUSH_AUTO_SYNC, FLUSH_MANUAL
from kudu_async.client.sync import Client, Scanner, ScanTokenBuilder, Session, TableAlterer, connect
from kudu_async.client.table import (
    Column,
    Delete,
    DeleteIgnore,
    FailedRow,
    Insert,
    InsertIgnore,
    Predicate,
    Table,
    Update,
    UpdateIgnore,
    Upsert,
    UpsertIgnore,
    WriteOperation,
)

__all__ = [
    "CLOSEST_REPLICA",
    "FIRST_REPLICA",
    "FLUSH_AUTO_BACKGROUND",
    "FLUSH_AUTO_SYNC",
    "FLUSH_MANUAL",
    "LEADER_ONLY",
    "READ_AT_SNAPSHOT",
    "READ_LATEST",
    "READ_YOUR_WRITES",
    "Client",
    "Column",
    "Delete",
    "DeleteIgnore",
    "FailedRow",
    "Insert",
    "InsertIgnore",
    "KuduError",
    "Partitioning",
    "Predicate",
    "RangePartition",
    "ScanToken",
    "ScanTokenBuilder",
    "Scanner",
    "Session",
    "Table",
    "TableAlterer",
    "Tablet",
    "Update",
    "UpdateIgnore",
    "Upsert",
    "UpsertIgnore",
    "WriteOperation",
    "connect",
]

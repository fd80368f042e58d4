"""kudu-python's names and behaviour that need no cluster: constants, TimeDelta, KuduValue, PartialRow and
bounds, schema and column introspection, reprs and error messages, kudu.util, timestamps given as strings,
RowBatch, Tablet/Replica/TabletServer, and the security options that must be refused rather than ignored."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import kudu_async as kudu
import kudu_async.util as kutil
from kudu_async.client.meta_cache import ReplicaLocation, TabletLocation
from kudu_async.client.scanner import ScanConfig, ScanToken, snapshot_to_hybrid
from kudu_async.client.table import Table
from kudu_async.common.clock import make_timestamp
from kudu_async.common.key_encoding import encode_key
from kudu_async.common.partition import Partition
from kudu_async.common.schema import PartialRow


@pytest.fixture
def ts_table(make_table: Callable[..., Table]) -> Table:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("ts", kudu.unixtime_micros)
    b.add_column("dec", kudu.decimal, precision=8, scale=2, nullable=False, default=Decimal("0.00"))
    b.add_column("name", kudu.varchar, length=10)
    return make_table(b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2))


# --- constants and top-level names ------------------------------------------------------------------------


def test_kudu_python_constants_and_top_level_classes() -> None:
    assert kudu.CLIENT_SUPPORTS_DECIMAL is True and isinstance(kudu.CLIENT_SUPPORTS_PANDAS, bool)
    assert (kudu.INCLUSIVE_BOUND, kudu.EXCLUSIVE_BOUND) == ("inclusive", "exclusive")
    assert kudu.client.ENCRYPTION_OPTIONAL == kudu.ENCRYPTION_OPTIONAL
    assert kudu.COMPRESSION_LZ4 == "lz4" and kudu.ENCODING_BIT_SHUFFLE == "bit_shuffle"
    assert (kudu.schema.INT8, kudu.schema.INT64, kudu.schema.DATE) == (0, 3, 19)
    assert kudu.schema.string_ is kudu.string and kudu.schema.double_ is kudu.double
    for name in ("Table", "Scanner", "Session", "Insert", "Upsert", "Delete", "TimeDelta", "KuduError", "ScanToken"):
        assert getattr(kudu, name) is getattr(kudu.client, name)
    for name in ("SchemaBuilder", "ColumnSpec", "Schema", "ColumnSchema", "KuduType"):
        assert getattr(kudu, name) is getattr(kudu.schema, name)


def test_compression_and_encoding_constants_build_columns() -> None:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key().encoding(kudu.ENCODING_BIT_SHUFFLE)
    b.add_column("s", kudu.string).compression(kudu.COMPRESSION_ZLIB).encoding(kudu.ENCODING_DICT)
    s = b.build()
    assert (s["key"].encoding, s["s"].compression, s["s"].encoding) == ("bit_shuffle", "zlib", "dict")


def test_timedelta_sums_its_parts_and_compares() -> None:
    d = kudu.timedelta(seconds=1, millis=500, micros=2, nanos=3)
    assert d.to_nanos() == 1_500_002_003 and d.to_micros() == 1_500_002 and d.to_millis() == 1500
    assert d.to_seconds() == pytest.approx(1.500002003)
    assert kudu.TimeDelta.from_millis(1500) < d <= kudu.TimeDelta.from_nanos(1_500_002_003)
    assert kudu.TimeDelta.from_seconds(2.5) == kudu.TimeDelta.from_micros(2_500_000) > d
    assert repr(kudu.TimeDelta.from_millis(1500)) == "kudu.TimeDelta(1.500s)"
    assert repr(kudu.TimeDelta()) == "kudu.TimeDelta()"
    with pytest.raises(kudu.KuduInvalidArgument, match="never set"):
        kudu.TimeDelta().to_millis()


def test_security_options_that_cannot_be_kept_are_refused_before_connecting() -> None:
    with pytest.raises(kudu.KuduNotSupported, match="sasl_protocol_name: Kerberos"):
        kudu.Client("127.0.0.1:1", sasl_protocol_name="other")


@pytest.mark.parametrize("policy", [kudu.ENCRYPTION_REQUIRED, kudu.ENCRYPTION_REQUIRED_REMOTE])
def test_stricter_encryption_policies_are_kept_and_bad_trusted_certificates_refused(policy: str) -> None:
    # Accepted: the client goes on to look for a master (none listens on port 1).
    with pytest.raises((kudu.KuduNetworkError, kudu.KuduTimedOut)):
        kudu.connect("127.0.0.1", 1, encryption_policy=policy, admin_timeout_ms=300)
    with pytest.raises(kudu.KuduInvalidArgument, match="trusted certificate 'PEM'"):
        kudu.connect("127.0.0.1", 1, encryption_policy=policy, trusted_certificates=["PEM"])
    with pytest.raises(kudu.KuduInvalidArgument, match="trusted certificate"):
        kudu.Client("127.0.0.1:1", trusted_certificates="-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n")


def test_authentication_options_are_checked_before_connecting() -> None:
    # require_authentication without credentials: refused at once, never a connection in the clear.
    for connect in (lambda **kw: kudu.connect("127.0.0.1", 1, **kw), lambda **kw: kudu.Client("127.0.0.1:1", **kw)):
        with pytest.raises(kudu.KuduNotAuthorized, match="require_authentication: this client has no credentials"):
            connect(require_authentication=True)
        with pytest.raises(kudu.KuduInvalidArgument, match="jwt must be a string"):
            connect(jwt=123)
        with pytest.raises(kudu.KuduInvalidArgument, match="jwt must be a compact JWT"):
            connect(jwt="not a jwt")
        with pytest.raises(kudu.KuduInvalidArgument, match="require_authentication must be True or False"):
            connect(require_authentication="yes")


def test_an_unknown_encryption_policy_or_no_master_is_an_error() -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match="encryption_policy must be one of"):
        kudu.connect("127.0.0.1", 1, encryption_policy="sometimes")
    with pytest.raises(ValueError, match="at least one master"):
        kudu.Client([])
    with pytest.raises(kudu.KuduNotSupported, match="sasl_protocol_name"):
        kudu.Client("127.0.0.1:1", sasl_protocol_name="kudu")


# --- values, rows and bounds ------------------------------------------------------------------------------


def test_kudu_value_checks_and_converts_for_its_type() -> None:
    v = kudu.int8.new_value(5)
    assert isinstance(v, kudu.schema.KuduValue) and (v.type, v.value) == (kudu.int8, 5)
    assert kudu.unixtime_micros.new_value("2016-09-14T23:11:32.432019").value == 1473894692432019
    assert kudu.date.new_value(dt.date(1970, 1, 11)).value == dt.date(1970, 1, 11)
    assert kudu.decimal.new_value(Decimal("1.25")).value == Decimal("1.25")
    assert repr(kudu.string.new_value("x")) == "KuduValue(string, 'x')"
    with pytest.raises(kudu.KuduInvalidArgument, match=r"column 'KuduValue\(int8\)': value 300 out of range"):
        kudu.int8.new_value(300)
    with pytest.raises(kudu.KuduInvalidArgument, match="needs a Decimal"):
        kudu.decimal.new_value(1.25)


def test_a_kudu_value_goes_where_a_value_does(ts_table: Table) -> None:
    op = ts_table.new_insert({"key": kudu.int64.new_value(7), "ts": kudu.unixtime_micros.new_value(10)})
    assert op.validated(ts_table.schema)["key"] == 7
    assert (ts_table["key"] == kudu.int64.new_value(3)).pred.value == 3


def test_partial_row_sets_cells_by_name_or_index_and_checks_them(ts_table: Table) -> None:
    row = ts_table.schema.new_row({"key": 5, 3: "abc"})
    assert isinstance(row, kudu.client.PartialRow) and dict(row) == {"key": 5, "name": "abc"}
    row.set_loc(1, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC))
    row["dec"] = Decimal("1.5")
    row.set_field_null("name")
    row.set_loc_null(1)
    assert dict(row) == {"key": 5, "ts": None, "dec": Decimal("1.50"), "name": None}
    assert ts_table.schema.new_row((1, None)) == {"key": 1, "ts": None}
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'key' is not nullable"):
        row.set_field("key", None)
    with pytest.raises(kudu.KuduInvalidArgument, match="expected int64"):
        row["key"] = "x"
    with pytest.raises(kudu.KuduNotFound, match="column 'nope'"):
        row["nope"] = 1
    with pytest.raises(IndexError, match="Column index 9 is not in range"):
        row.set_loc(9, 1)
    with pytest.raises(kudu.KuduInvalidArgument, match="needs a Schema"):
        PartialRow("schema")  # type: ignore[arg-type]


def test_scan_bounds_take_partial_rows_from_new_bound(ts_table: Table) -> None:
    c = ScanConfig(ts_table)
    lower = c.new_bound()
    lower["key"] = 10
    upper = c.new_bound()
    upper.set_field(0, 20)
    c.add_lower_bound(lower).add_exclusive_upper_bound(upper)
    assert c.lower_key == encode_key(ts_table.schema, [10]) and c.upper_key == encode_key(ts_table.schema, [20])


def test_range_partitions_and_splits_take_partial_rows(make_table: Callable[..., Table]) -> None:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    schema = b.build()
    p = kudu.Partitioning().set_range_partition_columns(["key"])
    p.add_range_partition(schema.new_row({"key": 0}), schema.new_row({"key": 100}), kudu.INCLUSIVE_BOUND)
    p.add_range_partition_split(schema.new_row([50]))
    wire = p.to_wire(schema.with_column_ids())
    assert wire == kudu.Partitioning().set_range_partition_columns(["key"]).add_range_partition(
        {"key": 0}, {"key": 100}
    ).add_range_partition_split({"key": 50}).to_wire(schema.with_column_ids())


# --- timestamps as strings ---------------------------------------------------------------------------------


def test_writes_take_timestamps_as_iso_strings_tuples_and_aware_datetimes(ts_table: Table) -> None:
    want = kutil.to_unixtime_micros(dt.datetime(2016, 9, 14, 23, 11, 32, 432019))
    for ts in (
        "2016-09-14T23:11:32.432019",
        ("2016-09-14 23:11:32.432019", "%Y-%m-%d %H:%M:%S.%f"),
        dt.datetime(2016, 9, 15, 1, 11, 32, 432019, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    ):
        assert ts_table.new_insert({"key": 1, "ts": ts}).validated(ts_table.schema)["ts"] == want
    day = ts_table.new_insert({"key": 1, "ts": ("2016-09-15", "%Y-%m-%d")}).validated(ts_table.schema)["ts"]
    assert day == kutil.to_unixtime_micros(dt.datetime(2016, 9, 15))
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'ts': expected unixtime_micros, got str: timestamp"):
        ts_table.new_insert({"key": 1, "ts": "yesterday"}).validated(ts_table.schema)
    with pytest.raises(kudu.KuduInvalidArgument, match=r"a timestamp tuple is \(string, format\)"):
        ts_table.new_insert({"key": 1, "ts": ("a", "b", "c")}).validated(ts_table.schema)


def test_predicates_and_snapshots_take_timestamp_strings(ts_table: Table) -> None:
    pred = ts_table["ts"] >= ("2016-09-15", "%Y-%m-%d")
    assert pred.pred.value == kutil.to_unixtime_micros(dt.datetime(2016, 9, 15))
    c = ScanConfig(ts_table).set_snapshot("2016-09-14T23:11:32.432019")
    assert c.snapshot_ts == make_timestamp(1473894692432019) and c.read_mode == kudu.READ_AT_SNAPSHOT
    c.set_snapshot("2016-09-15", "%Y-%m-%d")
    assert c.snapshot_ts == make_timestamp(kutil.to_unixtime_micros(dt.datetime(2016, 9, 15)))
    assert snapshot_to_hybrid(("2016-09-15", "%Y-%m-%d")) == c.snapshot_ts
    with pytest.raises(kudu.KuduInvalidArgument, match="does not match format"):
        c.set_snapshot("2016-09-15")


# --- schema and column introspection --------------------------------------------------------------------


def test_schema_and_column_introspection_and_reprs(ts_table: Table) -> None:
    s = ts_table.schema
    assert s.primary_key_indices() == [0] and s.primary_keys() == ["key"]
    assert s.at(1) is s[1] is s[-3] and s.get_loc("dec") == 2
    with pytest.raises(IndexError, match="Column index 4 is not in range"):
        s.at(4)
    with pytest.raises(KeyError):
        s.get_loc("nope")
    assert s.equals(Table(None, ts_table.info).schema) and not s.equals(s.drop_column("name"))  # type: ignore[arg-type]
    assert [c.type_to_string() for c in s] == [
        "INT64 NOT NULL",
        "UNIXTIME_MICROS NULLABLE",
        "DECIMAL(8, 2) NOT NULL",
        "VARCHAR(10) NULLABLE",
    ]
    assert repr(s) == (
        "kudu.Schema {\n"
        "  key   INT64 NOT NULL\n"
        "  ts    UNIXTIME_MICROS NULLABLE\n"
        "  dec   DECIMAL(8, 2) NOT NULL\n"
        "  name  VARCHAR(10) NULLABLE\n"
        "  PRIMARY KEY (key)\n"
        "}"
    )
    dec = s["dec"]
    assert repr(dec) == "ColumnSchema(name=dec, type=decimal, nullable=False)"
    assert repr(dec.type_attributes) == "ColumnTypeAttributes(precision=8, scale=2, length=None)"
    assert isinstance(dec.type_attributes, kudu.schema.ColumnTypeAttributes) and s["name"].type_attributes.length == 10
    assert dec.equals(s[2]) and not dec.equals(s[0]) and not dec.equals("dec")
    assert dec.mutable and repr(kudu.int64) == "KuduType(int64)"
    assert ts_table[0].spec is s[0] and ts_table[-1].spec is s["name"]


def test_column_spec_mutable_and_copy_column() -> None:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("frozen", kudu.string).mutable(False)
    b.add_column("free", kudu.string).mutable()
    s = b.build()
    assert (s["frozen"].mutable, s["free"].mutable) == (False, True)
    b2 = kudu.schema_builder()
    for c in s:
        b2.copy_column(c)
    b2.set_primary_keys(["key"])
    assert b2.build().equals(s)
    with pytest.raises(kudu.KuduInvalidArgument, match="takes a ColumnSchema"):
        b2.copy_column("key")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"type_": kudu.decimal}, "no precision provided for DECIMAL column: key"),
        ({"type_": kudu.decimal, "precision": 39}, "precision must be between 1 and 38: key"),
        ({"type_": kudu.decimal, "precision": 4, "scale": 5}, "scale is greater than the precision value of 4: key"),
        ({"type_": kudu.varchar}, "no length provided for VARCHAR column: key"),
        ({"type_": kudu.varchar, "length": 70000}, "length must be between 1 and 65535: key"),
        ({}, "no type provided for column: key"),
    ],
)
def test_schema_errors_carry_kudus_messages(kw: dict[str, Any], message: str) -> None:
    b = kudu.schema_builder()
    b.add_column("key", nullable=False, primary_key=True, **kw)
    with pytest.raises(kudu.KuduInvalidArgument) as e:
        b.build()
    assert message in str(e.value)


# --- kudu.util ---------------------------------------------------------------------------------------------


def test_util_conversions() -> None:
    assert kutil.to_unixtime_micros("2016-09-14T23:11:32.432019") == 1473894692432019
    assert kutil.to_unixtime_micros("2016-09-15", "%Y-%m-%d") == kutil.to_unixtime_micros(("2016-09-15", "%Y-%m-%d"))
    aware = dt.datetime(2016, 9, 15, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert kutil.to_unixtime_micros(aware) == kutil.to_unixtime_micros(dt.datetime(2016, 9, 15))
    with pytest.raises(ValueError, match="not int"):
        kutil.to_unixtime_micros(5)
    with pytest.raises(ValueError, match="does not match format"):
        kutil.to_unixtime_micros("2016-09-15")
    assert kutil.from_unixtime_micros(1473894692432019) == dt.datetime(2016, 9, 14, 23, 11, 32, 432019, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match="unixtime_micros is an int"):
        kutil.from_unixtime_micros(1.5)  # type: ignore[arg-type]
    assert kutil.from_hybridtime(make_timestamp(1_000_000, 7)) == dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=dt.UTC)
    assert kutil.to_unscaled_decimal(Decimal("-12.345")) == -12345 and kutil.to_unscaled_decimal(Decimal("7")) == 7
    assert kutil.from_unscaled_decimal(-12345, 3) == Decimal("-12.345")
    assert kutil.get_decimal_scale(Decimal("1.230")) == 3 and kutil.get_decimal_scale(Decimal("1E+2")) == 0
    assert kutil.unix_epoch_days_to_date(-1) == dt.date(1969, 12, 31)
    assert kutil.date_to_unix_epoch_days(dt.date(2016, 7, 18)) == 17000
    assert kutil.indent("a\nb", 2) == "  a\n  b"


# --- row batches, tablets, tablet servers --------------------------------------------------------------------


def test_row_batch_gives_tuples_by_index_iteration_and_as_tuples() -> None:
    t = pa.table({"k": [1, 2, 3], "v": ["a", None, "c"]})
    b = kudu.client.RowBatch(t)
    assert len(b) == 3 and b[1] == (2, None) and list(b) == [(1, "a"), (2, None), (3, "c")]
    assert b.as_tuples() == [(1, "a"), (2, None), (3, "c")] and b.to_arrow() is t
    assert repr(b) == "RowBatch(3 rows: k, v)"


def test_scan_token_tablet_replicas_and_tablet_servers(ts_table: Table) -> None:
    loc = TabletLocation(
        "tab1",
        Partition((0,), b"", b"", b"", b""),
        [ReplicaLocation("u1", "127.0.0.1:7050", "LEADER"), ReplicaLocation("u2", "[::1]:7150", "FOLLOWER")],
    )
    tablet = ScanToken(ts_table, loc, ScanConfig(ts_table).config_dict()).tablet()
    assert isinstance(tablet, kudu.client.Tablet) and tablet.id() == "tab1"
    r1, r2 = tablet.replicas()
    assert (r1.is_leader(), r2.is_leader()) == (True, False)
    ts = r1.ts()
    assert isinstance(ts, kudu.client.TabletServer)
    assert (ts.uuid(), ts.hostname(), ts.port()) == ("u1", "127.0.0.1", 7050)
    assert (r2.ts().hostname(), r2.ts().port()) == ("::1", 7150)
    listed = kudu.client.TabletServer({"uuid": "u1", "rpc_address": "127.0.0.1:7050", "live": True})
    assert listed == ts and listed["live"] and listed != r2.ts()


def test_column_and_kudu_error_reprs_are_kudu_pythons(ts_table: Table) -> None:
    assert repr(ts_table["dec"]) == "Column(dec, parent=t, type=decimal)"
    err = kudu.KuduError(kudu.KuduNotFound("key not found"), ts_table.new_delete({"key": 1}))
    assert repr(err) == "KuduError('NOT_FOUND: key not found')"
    assert str(err) == "NOT_FOUND: key not found (Delete(t, {'key': 1}))"
